// The peer workload for River (riverqueue/river with its pgx driver), shaped like
// taskbroker-bench's, on a Postgres database given by URL. Prints one JSON line of
// the taskbroker-bench shape. The flags and the shapes are bench/peers/node/bench.mjs's:
//
//	go run . -url postgres://... -config defaults|best [-tasks 20000] [-workers 32]
//	    [-producers P] [-batch B] [-shape overlap|phased]
//	    [-latency closed,500,1000,3000] [-latency-seconds 3]
//
// Throughput, -shape overlap (default): the client starts first and gets 300 ms to
// settle, then the clock starts and P producers (one call in flight each) insert
// their share in calls of B jobs while the workers drain; the clock stops when no
// job is left unsettled in river_job (counted by SQL once every Work call
// returned). best: 2 producers x InsertManyFast of 500; defaults: one producer per
// worker, one Insert per job. -shape phased: insert all (InsertManyFast of 1000,
// or per-job Inserts from P goroutines), then start the client and drain.
// Pick-up latency (-latency): from the insert call being sent to Work starting;
// "closed" = one job at a time for -latency-seconds, a number = that many jobs/s
// offered (open loop, what is due every millisecond in one call).
//
// "defaults": default client config (100 ms FetchCooldown, 1 s FetchPollInterval),
// default pgx pool. "best": FetchCooldown 1 ms, FetchPollInterval 50 ms, a pool
// of workers + 4 connections (River wakes producers by LISTEN/NOTIFY in both).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

const (
	phasedBulk   = 1000
	settle       = 300 * time.Millisecond
	drainTimeout = 10 * time.Minute
	tick         = time.Millisecond
	warmCalls    = 32
)

// NoopArgs is a throughput job (S nil) or a latency job numbered S.
type NoopArgs struct {
	S *int `json:"s,omitempty"`
}

func (NoopArgs) Kind() string { return "noop" }

// stamps holds the instants latency jobs' Work started, by number.
type stamps struct {
	mu      sync.Mutex
	started map[int]time.Time
	waiter  chan int
}

func (s *stamps) reset(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = make(map[int]time.Time, n)
}

func (s *stamps) set(seq int, at time.Time) {
	s.mu.Lock()
	s.started[seq] = at
	s.mu.Unlock()
	select {
	case s.waiter <- seq:
	default:
	}
}

func (s *stamps) get(seq int) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.started[seq]
	return t, ok
}

func (s *stamps) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.started)
}

type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
	done   *atomic.Int64
	stamps *stamps
}

func (w *NoopWorker) Work(ctx context.Context, job *river.Job[NoopArgs]) error {
	if job.Args.S != nil {
		w.stamps.set(*job.Args.S, time.Now())
	} else {
		w.done.Add(1)
	}
	return nil
}

type options struct {
	url, config, shape, label string
	tasks, workers, producers int
	batch                     int
	loops                     []float64 // 0 = closed loop
	latencySeconds            float64
}

func main() {
	var o options
	var latency string
	flag.StringVar(&o.url, "url", "", "Postgres URL of an empty database")
	flag.StringVar(&o.config, "config", "defaults", "defaults or best")
	flag.IntVar(&o.tasks, "tasks", 20000, "jobs of the throughput phase")
	flag.IntVar(&o.workers, "workers", 32, "MaxWorkers of the queue")
	flag.IntVar(&o.producers, "producers", 0, "concurrent producers (default: 2 in best overlap, else workers)")
	flag.IntVar(&o.batch, "batch", 0, "jobs per insert call (default: 500 in best, else 1)")
	flag.StringVar(&o.shape, "shape", "overlap", "overlap or phased")
	flag.StringVar(&latency, "latency", "", "pick-up latency loops after the throughput phase: closed and/or rates, comma-separated")
	flag.Float64Var(&o.latencySeconds, "latency-seconds", 3, "length of each latency loop")
	flag.StringVar(&o.label, "label", "", "copied into the JSON line")
	flag.Parse()
	best := o.config == "best"
	for _, l := range strings.Split(latency, ",") {
		switch r, err := strconv.ParseFloat(l, 64); {
		case l == "":
		case l == "closed":
			o.loops = append(o.loops, 0)
		case err == nil && r > 0:
			o.loops = append(o.loops, r)
		default:
			o.url = "" // usage below
		}
	}
	if o.url == "" || (o.config != "defaults" && o.config != "best") || (o.shape != "overlap" && o.shape != "phased") || o.tasks < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if o.producers == 0 {
		o.producers = o.workers
		if best && o.shape == "overlap" {
			o.producers = 2
		}
	}
	if o.batch == 0 {
		o.batch = 1
		if best {
			o.batch = 500
		}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	o      options
	best   bool
	client *river.Client[pgx.Tx]
	pool   *pgxpool.Pool
	done   atomic.Int64
	stamps stamps
}

// insert inserts jobs in one call: InsertManyFast in best, per-job Inserts otherwise.
func (b *bench) insert(ctx context.Context, args []NoopArgs) error {
	if b.best {
		params := make([]river.InsertManyParams, len(args))
		for i, a := range args {
			params[i] = river.InsertManyParams{Args: a}
		}
		_, err := b.client.InsertManyFast(ctx, params)
		return err
	}
	for _, a := range args {
		if _, err := b.client.Insert(ctx, a, nil); err != nil {
			return err
		}
	}
	return nil
}

func run(o options) error {
	ctx := context.Background()
	b := &bench{o: o, best: o.config == "best"}
	b.stamps.reset(0)
	b.stamps.waiter = make(chan int, 1)
	poolConfig, err := pgxpool.ParseConfig(o.url)
	if err != nil {
		return err
	}
	if b.best {
		poolConfig.MaxConns = int32(o.workers + 4)
	}
	if b.pool, err = pgxpool.NewWithConfig(ctx, poolConfig); err != nil {
		return err
	}
	defer b.pool.Close()
	driver := riverpgxv5.New(b.pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}

	registry := river.NewWorkers()
	river.AddWorker(registry, &NoopWorker{done: &b.done, stamps: &b.stamps})
	cfg := &river.Config{
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.workers}},
		Workers: registry,
	}
	name := "defaults + per-job Insert"
	if b.best {
		cfg.FetchCooldown = time.Millisecond
		cfg.FetchPollInterval = 50 * time.Millisecond
		name = "InsertManyFast + FetchCooldown 1ms"
	}
	if b.client, err = river.NewClient(driver, cfg); err != nil {
		return err
	}

	var elapsed, submit, drain time.Duration
	if o.shape == "overlap" {
		elapsed, submit, err = b.overlap(ctx)
	} else {
		elapsed, submit, drain, err = b.phased(ctx)
	}
	if err != nil {
		return err
	}
	var loops []map[string]any
	if len(o.loops) > 0 {
		if err := b.warm(ctx); err != nil {
			return err
		}
	}
	for _, rate := range o.loops {
		l, err := b.latency(ctx, rate)
		if err != nil {
			return err
		}
		loops = append(loops, l)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = b.client.Stop(stopCtx)

	n := float64(o.tasks)
	mode, prod, batch := "per-task", o.producers, o.batch
	if b.best {
		mode = "batched"
	}
	if o.shape == "phased" && b.best {
		prod, batch = 1, phasedBulk
	}
	var drainRate any
	if drain > 0 {
		drainRate = round1(n / drain.Seconds())
	}
	line := map[string]any{
		"system": "river", "label": nullable(o.label), "store": "postgres", "mode": mode, "config": name,
		"shape": o.shape, "tasks": o.tasks, "producers": prod, "workers": o.workers, "submit_batch": batch,
		"lifecycles_per_sec": round1(n / elapsed.Seconds()),
		"submit_per_sec":     round1(n / submit.Seconds()),
		"drain_per_sec":      drainRate,
		"elapsed_sec":        math.Round(elapsed.Seconds()*1000) / 1000,
		"handled":            b.done.Load(),
		"dispatch_rate":      nil, "dispatch_p50_ms": nil, "dispatch_p99_ms": nil, "dispatch_max_ms": nil,
		"dispatch_from_send_p50_ms": nil, "dispatch_from_send_p99_ms": nil,
		"latency":       loopsOrEmpty(loops),
		"broker_rss_mb": nil,
	}
	for _, l := range loops {
		if l["loop"] == "open" {
			line["dispatch_rate"], line["dispatch_from_send_p50_ms"], line["dispatch_from_send_p99_ms"] = l["offered_rate"], l["p50_ms"], l["p99_ms"]
			break
		}
	}
	fmt.Printf("river (%s, %s): %.1f/s lifecycles, enqueue %.1f/s, %d workers\n",
		name, o.shape, line["lifecycles_per_sec"], line["submit_per_sec"], o.workers)
	for _, l := range loops {
		at := ""
		if l["offered_rate"] != nil {
			at = fmt.Sprintf(" at %v/s", l["offered_rate"])
		}
		fmt.Printf("  pick-up %v%s: p50 %v / p99 %v / max %v ms, %v jobs, %v/s\n",
			l["loop"], at, l["p50_ms"], l["p99_ms"], l["max_ms"], l["samples"], l["achieved_rate"])
	}
	out, err := json.Marshal(line)
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// overlap: the client runs first; P producers insert while it drains.
func (b *bench) overlap(ctx context.Context) (elapsed, submit time.Duration, err error) {
	if err := b.client.Start(ctx); err != nil {
		return 0, 0, err
	}
	time.Sleep(settle)
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	submitEnd := t0
	errs := make(chan error, b.o.producers)
	for i := range b.o.producers {
		from, to := b.o.tasks*i/b.o.producers, b.o.tasks*(i+1)/b.o.producers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next := from; next < to; next += b.o.batch {
				if err := b.insert(ctx, make([]NoopArgs, min(b.o.batch, to-next))); err != nil {
					errs <- err
					return
				}
			}
			mu.Lock()
			if now := time.Now(); now.After(submitEnd) {
				submitEnd = now
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	if err := waitSettled(ctx, b.pool, &b.done, int64(b.o.tasks)); err != nil {
		return 0, 0, err
	}
	return time.Since(t0), submitEnd.Sub(t0), nil
}

// phased: insert everything, then start the client and drain.
func (b *bench) phased(ctx context.Context) (elapsed, submit, drain time.Duration, err error) {
	t0 := time.Now()
	if b.best {
		for i := 0; i < b.o.tasks && err == nil; i += phasedBulk {
			err = b.insert(ctx, make([]NoopArgs, min(phasedBulk, b.o.tasks-i)))
		}
	} else {
		err = insertEach(ctx, b.client, b.o.tasks, b.o.producers)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	t1 := time.Now()
	if err := b.client.Start(ctx); err != nil {
		return 0, 0, 0, err
	}
	if err := waitSettled(ctx, b.pool, &b.done, int64(b.o.tasks)); err != nil {
		return 0, 0, 0, err
	}
	t2 := time.Now()
	return t2.Sub(t0), t1.Sub(t0), t2.Sub(t1), nil
}

// warm opens the pool's connections before the latency loops (as taskbroker-bench
// connects before it measures): warmCalls one-job inserts at once, then waits until
// they are worked.
func (b *bench) warm(ctx context.Context) error {
	before := b.done.Load()
	var wg sync.WaitGroup
	errs := make(chan error, warmCalls)
	for range warmCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.insert(ctx, []NoopArgs{{}}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return waitSettled(ctx, b.pool, &b.done, before+warmCalls)
}

// latency runs one loop on the running client: rate 0 = closed loop.
func (b *bench) latency(ctx context.Context, rate float64) (map[string]any, error) {
	d := time.Duration(b.o.latencySeconds * float64(time.Second))
	var sent, acked []time.Time
	b.stamps.reset(0)
	origin := time.Now()
	deadline := origin.Add(d + drainTimeout)
	job := func(seq int) NoopArgs { return NoopArgs{S: &seq} }
	if rate == 0 {
		for time.Since(origin) < d {
			seq := len(sent)
			sent = append(sent, time.Now())
			if err := b.insert(ctx, []NoopArgs{job(seq)}); err != nil {
				return nil, err
			}
			acked = append(acked, time.Now())
			for {
				if _, ok := b.stamps.get(seq); ok {
					break
				}
				select {
				case <-b.stamps.waiter:
				case <-time.After(time.Until(deadline)):
					return nil, fmt.Errorf("closed loop timed out")
				}
			}
		}
	} else {
		total := max(1, int(math.Round(rate*b.o.latencySeconds)))
		sent, acked = make([]time.Time, total), make([]time.Time, total)
		var wg sync.WaitGroup
		errs := make(chan error, total)
		ticker := time.NewTicker(tick)
		next := 0
		for next < total {
			<-ticker.C
			due := min(total, int(time.Since(origin).Seconds()*rate))
			for next < due {
				end := min(due, next+b.o.batch)
				args := make([]NoopArgs, 0, end-next)
				for seq := next; seq < end; seq++ {
					args = append(args, job(seq))
					sent[seq] = time.Now()
				}
				wg.Add(1)
				go func(from, to int) {
					defer wg.Done()
					if err := b.insert(ctx, args); err != nil {
						errs <- err
					}
					now := time.Now()
					for i := from; i < to; i++ {
						acked[i] = now
					}
				}(next, end)
				next = end
			}
		}
		ticker.Stop()
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return nil, err
		}
		for b.stamps.count() < total {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("open loop at %v/s timed out", rate)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	// How late each send was against its schedule: a late sender means the load
	// generator, not the system, set the pace.
	var lag []float64
	if rate > 0 {
		for i, s := range sent {
			due := origin.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			lag = append(lag, max(0, ms(s.Sub(due))))
		}
		slices.Sort(lag)
	}
	var samples, fromAck []float64
	var last time.Time
	for i, s := range sent {
		if t, ok := b.stamps.get(i); ok {
			samples = append(samples, ms(t.Sub(s)))
			fromAck = append(fromAck, max(0, ms(t.Sub(acked[i]))))
			if t.After(last) {
				last = t
			}
		}
	}
	slices.Sort(samples)
	slices.Sort(fromAck)
	l := map[string]any{
		"loop": "closed", "offered_rate": nil,
		"achieved_rate":   round1(float64(len(samples)) / last.Sub(sent[0]).Seconds()),
		"samples":         len(samples),
		"p50_ms":          percentile(samples, 0.5),
		"p99_ms":          percentile(samples, 0.99),
		"max_ms":          percentile(samples, 1),
		"from_ack_p50_ms": percentile(fromAck, 0.5),
		"from_ack_p99_ms": percentile(fromAck, 0.99),
		"send_lag_p99_ms": percentile(lag, 0.99),
	}
	if rate > 0 {
		l["loop"], l["offered_rate"] = "open", rate
	}
	return l, nil
}

func insertEach(ctx context.Context, client *river.Client[pgx.Tx], tasks, producers int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(tasks) {
				if _, err := client.Insert(ctx, NoopArgs{}, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitSettled waits until every Work call returned, then until no job is left
// unsettled in the database (River completes jobs in asynchronous batches).
func waitSettled(ctx context.Context, pool *pgxpool.Pool, done *atomic.Int64, tasks int64) error {
	deadline := time.Now().Add(drainTimeout)
	for done.Load() < tasks {
		if time.Now().After(deadline) {
			return fmt.Errorf("drain timed out: %d of %d jobs worked", done.Load(), tasks)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for {
		var left int64
		err := pool.QueryRow(ctx, "select count(*) from river_job where state <> 'completed'").Scan(&left)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drain timed out: %d jobs not completed", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// percentile is the nearest-rank percentile q of sorted milliseconds, rounded to microseconds.
func percentile(sorted []float64, q float64) any {
	if len(sorted) == 0 {
		return nil
	}
	rank := min(max(int(math.Ceil(q*float64(len(sorted)))), 1), len(sorted))
	return math.Round(sorted[rank-1]*1000) / 1000
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func loopsOrEmpty(l []map[string]any) []map[string]any {
	if l == nil {
		return []map[string]any{}
	}
	return l
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
