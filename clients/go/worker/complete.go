package worker

// Completions share calls. While one settle call is in flight, the Completes that come
// next queue; when it returns, everything that queued goes as one CompleteMany (one call,
// one database statement on the broker for the lot). Alone, a Complete is sent at once as a
// plain Complete, so batching adds no latency when the worker is quiet.
//
// Each completion gets the answer its own Complete would have had (LEASE_LOST per item). If
// the broker refuses the batch as a whole (a result over its size limit), each completion of
// it is sent on its own instead. A batch the broker could not be reached for answers every
// completion with that error, and each one's settle retry (report) queues it again.
//
// lease_next: a batch asks once, for as many tasks as its completions asked for, and hands
// them out in order, one per asking completion.

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/taskbroker/taskbroker/clients/go/rpcerr"
	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// Completions per CompleteMany at most (the broker takes up to 1000), and result bytes per
// call at most, well under gRPC's default 4 MiB message limit.
const (
	MaxCompleteBatch      = 256
	MaxCompleteBatchBytes = 1 << 20
)

// settled is the answer for one completion: Complete's error, and the tasks leased for its
// slot (given even when the completion itself lost its lease, so none is dropped).
type settled struct {
	err  error
	next []*pb.LeasedTask
}

type completion struct {
	req   *pb.CompleteRequest
	reply chan settled // buffered: the sender never waits for the reader
}

type completer struct {
	w *Worker

	mu      sync.Mutex
	queue   []*completion
	sending bool // a goroutine is sending; it takes what queues
	busy    bool // its call is in flight
}

// complete sends req (through a batch when a call is in flight) and returns its answer, or
// errSettleAbandoned once the worker's stop margin has run out.
func (c *completer) complete(req *pb.CompleteRequest) settled {
	item := &completion{req: req, reply: make(chan settled, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, item)
	if !c.sending {
		c.sending = true
		go c.loop()
	}
	c.mu.Unlock()
	select {
	case s := <-item.reply:
		return s
	case <-c.w.settleCtx.Done():
		return settled{err: errSettleAbandoned}
	}
}

// queued is how many completions wait for the call in flight.
func (c *completer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.busy {
		return 0
	}
	return len(c.queue)
}

// loop sends the first completion alone (nothing was in flight when it came), then, while
// more queued during the call before, all that queued as one batch; it ends when a call
// returns to an empty queue.
func (c *completer) loop() {
	limit := 1
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.sending = false
			c.mu.Unlock()
			return
		}
		n, bytes := 0, 0
		for n < len(c.queue) && n < limit && (n == 0 || bytes < MaxCompleteBatchBytes) {
			bytes += len(c.queue[n].req.GetResult())
			n++
		}
		batch := c.queue[:n:n]
		c.queue = c.queue[n:]
		c.busy = true
		c.mu.Unlock()
		c.send(batch)
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
		limit = MaxCompleteBatch
	}
}

func (c *completer) send(batch []*completion) {
	if len(batch) == 1 {
		c.alone(batch[0])
		return
	}
	asking := 0
	var next *pb.LeaseRequest
	completions := make([]*pb.CompleteRequest, len(batch))
	for i, item := range batch {
		if ln := item.req.GetLeaseNext(); ln != nil {
			asking++
			next = ln
		}
		completions[i] = &pb.CompleteRequest{
			TaskId: item.req.GetTaskId(), LeaseToken: item.req.GetLeaseToken(), Result: item.req.GetResult(),
		}
	}
	req := &pb.CompleteManyRequest{Completions: completions}
	if next != nil {
		ln := proto.Clone(next).(*pb.LeaseRequest)
		ln.MaxTasks = uint32(asking)
		req.LeaseNext = ln
	}
	ctx, cancel := context.WithTimeout(c.w.settleCtx, CallTimeout)
	c.w.metrics.settleCall("CompleteMany")
	resp, err := c.w.broker.CompleteMany(ctx, req)
	cancel()
	if err != nil {
		if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded {
			for _, item := range batch { // each one's settle retry queues it again
				item.reply <- settled{err: err}
			}
			return
		}
		c.w.log.Warn("CompleteMany refused; sending each completion on its own",
			"code", status.Code(err).String(), "err", err, "completions", len(batch))
		c.oneByOne(batch)
		return
	}
	results, tasks := resp.GetResults(), resp.GetNextTasks()
	if len(results) != len(batch) {
		for _, t := range tasks {
			c.w.log.Error("a malformed CompleteMany answer; its lease will expire", "task_id", t.GetTaskId())
		}
		c.oneByOne(batch)
		return
	}
	for i, item := range batch {
		var mine []*pb.LeasedTask
		if item.req.GetLeaseNext() != nil && len(tasks) > 0 {
			mine, tasks = tasks[:1], tasks[1:]
		}
		item.reply <- settled{err: completeOutcome(results[i].GetTaskId(), results[i].GetOutcome()), next: mine}
	}
	for _, t := range tasks {
		c.w.log.Error("the broker returned more tasks than asked for; its lease will expire", "task_id", t.GetTaskId())
	}
}

// alone sends one completion as a plain Complete.
func (c *completer) alone(item *completion) {
	ctx, cancel := context.WithTimeout(c.w.settleCtx, CallTimeout)
	defer cancel()
	c.w.metrics.settleCall("Complete")
	resp, err := c.w.broker.Complete(ctx, item.req)
	item.reply <- settled{err: err, next: resp.GetNextTasks()}
}

func (c *completer) oneByOne(batch []*completion) {
	var wg sync.WaitGroup
	for _, item := range batch {
		wg.Add(1)
		go func() { defer wg.Done(); c.alone(item) }()
	}
	wg.Wait()
}

// completeOutcome is the error Complete would have answered for one task of CompleteMany.
func completeOutcome(taskID string, o pb.CompleteOutcome) error {
	switch o {
	case pb.CompleteOutcome_COMPLETE_OUTCOME_COMPLETED:
		return nil
	case pb.CompleteOutcome_COMPLETE_OUTCOME_LEASE_LOST:
		st, err := status.New(codes.Aborted, "the lease of task "+taskID+" is no longer held").
			WithDetails(&errdetails.ErrorInfo{Domain: rpcerr.Domain, Reason: rpcerr.ReasonLeaseLost})
		if err != nil {
			return status.Error(codes.Aborted, "the lease of task "+taskID+" is no longer held")
		}
		return st.Err()
	case pb.CompleteOutcome_COMPLETE_OUTCOME_NOT_FOUND:
		return status.Error(codes.NotFound, "task "+taskID+" not found")
	default:
		return fmt.Errorf("taskbroker: CompleteMany answered outcome %v for task %s", o, taskID)
	}
}
