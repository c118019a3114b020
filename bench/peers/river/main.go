// The peer workload for River (riverqueue/river with its pgx driver), the same
// as taskbroker-bench's: enqueue N no-op jobs, then drain them with W workers,
// on a Postgres database given by URL. Prints one JSON line of the
// taskbroker-bench shape.
//
//	go run . -url postgres://... -config defaults|best [-tasks 20000] [-workers 32] [-producers W]
//
// "defaults": default client config (100 ms FetchCooldown, 1 s FetchPollInterval),
// default pgx pool, one Insert per job from -producers goroutines.
// "best": InsertManyFast per 1000 jobs, FetchCooldown 1 ms, FetchPollInterval
// 50 ms, a pool of workers + 4 connections.
// lifecycles/s = N / (enqueue time + drain time); the drain ends when no job is
// left unsettled in river_job (counted by SQL after every Work call returned).
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
	bulk         = 1000
	drainTimeout = 10 * time.Minute
)

type NoopArgs struct{}

func (NoopArgs) Kind() string { return "noop" }

type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
	done *atomic.Int64
}

func (w *NoopWorker) Work(ctx context.Context, job *river.Job[NoopArgs]) error {
	w.done.Add(1)
	return nil
}

func main() {
	url := flag.String("url", "", "Postgres URL of an empty database")
	config := flag.String("config", "defaults", "defaults or best")
	tasks := flag.Int("tasks", 20000, "jobs to enqueue and drain")
	workers := flag.Int("workers", 32, "MaxWorkers of the queue")
	producers := flag.Int("producers", 0, "concurrent Insert calls in defaults mode (default: workers)")
	label := flag.String("label", "", "copied into the JSON line")
	flag.Parse()
	if *url == "" || (*config != "defaults" && *config != "best") {
		flag.Usage()
		os.Exit(2)
	}
	if *producers == 0 {
		*producers = *workers
	}
	if err := run(*url, *config, *tasks, *workers, *producers, *label); err != nil {
		fmt.Fprintln(os.Stderr, "river bench:", err)
		os.Exit(1)
	}
}

func run(url, config string, tasks, workers, producers int, label string) error {
	ctx := context.Background()
	best := config == "best"
	poolConfig, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	if best {
		poolConfig.MaxConns = int32(workers + 4)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}

	var done atomic.Int64
	registry := river.NewWorkers()
	river.AddWorker(registry, &NoopWorker{done: &done})
	cfg := &river.Config{
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: registry,
	}
	name := "defaults + per-job Insert"
	if best {
		cfg.FetchCooldown = time.Millisecond
		cfg.FetchPollInterval = 50 * time.Millisecond
		name = "InsertManyFast + FetchCooldown 1ms"
	}
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		return err
	}

	t0 := time.Now()
	if best {
		err = insertBulk(ctx, client, tasks)
	} else {
		err = insertEach(ctx, client, tasks, producers)
	}
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	if err := waitSettled(ctx, pool, &done, int64(tasks)); err != nil {
		return err
	}
	t2 := time.Now()
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = client.Stop(stopCtx)

	enqueue, drain := t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds()
	n := float64(tasks)
	mode, prod := "per-task", producers
	if best {
		mode, prod = "batched", 1
	}
	line := map[string]any{
		"system": "river", "label": nullable(label), "store": "postgres", "mode": mode, "config": name,
		"tasks": tasks, "producers": prod, "workers": workers,
		"lifecycles_per_sec": round1(n / (enqueue + drain)),
		"submit_per_sec":     round1(n / enqueue),
		"drain_per_sec":      round1(n / drain),
		"elapsed_sec":        math.Round((enqueue+drain)*1000) / 1000,
		"handled":            done.Load(),
		"dispatch_p50_ms":    nil, "dispatch_p99_ms": nil, "dispatch_max_ms": nil,
		"broker_rss_mb": nil,
	}
	fmt.Printf("river (%s): %.1f/s lifecycles, enqueue %.1f/s, drain %.1f/s, %d workers\n",
		name, line["lifecycles_per_sec"], line["submit_per_sec"], line["drain_per_sec"], workers)
	out, err := json.Marshal(line)
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
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

func insertBulk(ctx context.Context, client *river.Client[pgx.Tx], tasks int) error {
	for i := 0; i < tasks; i += bulk {
		n := min(bulk, tasks-i)
		params := make([]river.InsertManyParams, n)
		for j := range params {
			params[j] = river.InsertManyParams{Args: NoopArgs{}}
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return err
		}
	}
	return nil
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

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
