package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"google.golang.org/grpc"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
)

// Mux is one worker's handlers, one per queue: the worker it makes leases from every
// registered queue in one Lease call and runs each task under its queue's handler.
//
//	mux := worker.NewMux()
//	mux.Handle("emails", worker.HandleJSON(sendEmail))
//	mux.Handle("invoices", worker.HandleJSON(renderInvoice))
//	w, err := mux.Worker(conn, worker.Config{Concurrency: 8})
type Mux struct {
	handlers map[string]Handler
	defaults *taskbroker.RetryDefaults // retry defaults of HandlePolicy (policy.go)
	slots    map[string]int            // Policy.Concurrency of HandlePolicy, by queue
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{handlers: map[string]Handler{}} }

// Handle registers h for queue. It panics on an empty queue name, a nil handler or a queue
// registered twice, as http.ServeMux does: these are mistakes in the program.
func (m *Mux) Handle(queue string, h Handler) {
	switch {
	case queue == "":
		panic("worker: Mux.Handle with an empty queue name")
	case h == nil:
		panic("worker: Mux.Handle(" + queue + ") with a nil handler")
	}
	if _, dup := m.handlers[queue]; dup {
		panic("worker: Mux.Handle(" + queue + ") registered twice")
	}
	m.handlers[queue] = h
}

// Queues are the registered queues, sorted.
func (m *Mux) Queues() []string {
	qs := make([]string, 0, len(m.handlers))
	for q := range m.handlers {
		qs = append(qs, q)
	}
	sort.Strings(qs)
	return qs
}

// Worker makes a Worker on conn that leases from every registered queue (cfg.Queues must be
// empty or name exactly those) and runs each task under its queue's handler.
func (m *Mux) Worker(conn grpc.ClientConnInterface, cfg Config) (*Worker, error) {
	qs := m.Queues()
	if len(cfg.Queues) > 0 {
		given := slices.Clone(cfg.Queues)
		sort.Strings(given)
		if !slices.Equal(given, qs) {
			return nil, fmt.Errorf("worker: Config.Queues %v differs from the Mux's queues %v; leave it empty", cfg.Queues, qs)
		}
	}
	cfg.Queues = qs
	if cfg.QueueConcurrency == nil && len(m.slots) > 0 {
		cfg.QueueConcurrency = maps.Clone(m.slots)
	}
	handlers := make(map[string]Handler, len(m.handlers))
	for q, h := range m.handlers { // later Handle calls do not change this worker
		handlers[q] = h
	}
	return New(conn, cfg, func(ctx context.Context, t *Task) ([]byte, error) {
		h, ok := handlers[t.GetQueue()]
		if !ok {
			return nil, Permanentf("worker: no handler for queue %s", t.GetQueue())
		}
		return h(ctx, t)
	})
}
