package worker

import (
	"sync"

	pb "github.com/taskbroker/taskbroker/clients/go/taskbrokerv1"
)

// queueLimits caps the tasks of some queues running at once in one worker
// (Config.QueueConcurrency). A Lease asks only for queues with room, for no more tasks than
// the smallest room among the limited queues it names, and holds that many of each of them
// until its answer is counted; a settle's lease_next stays within the freed slot's kind (its
// own limited queue, or the unlimited ones), so its slot passes on without a gap.
type queueLimits struct {
	mu    sync.Mutex
	limit map[string]int
	used  map[string]int // running plus held by a Lease in flight
	freed chan struct{}  // a limited queue's slot came free
}

func newQueueLimits(limit map[string]int) *queueLimits {
	l := &queueLimits{limit: map[string]int{}, used: map[string]int{}, freed: make(chan struct{}, 1)}
	for q, n := range limit {
		if n > 0 {
			l.limit[q] = n
		}
	}
	if len(l.limit) == 0 {
		return nil
	}
	return l
}

// reserve is the queues and max tasks of a Lease with free slots, and the call that counts its
// answer; n is 0 when every queue is full.
func (l *queueLimits) reserve(all []string, free int) (queues []string, n int, got func([]*pb.LeasedTask)) {
	if l == nil {
		return all, free, func([]*pb.LeasedTask) {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n = free
	var held []string
	for _, q := range all {
		lim, limited := l.limit[q]
		if limited && l.used[q] >= lim {
			continue
		}
		queues = append(queues, q)
		if limited {
			held = append(held, q)
			n = min(n, lim-l.used[q])
		}
	}
	if len(queues) == 0 {
		return nil, 0, func([]*pb.LeasedTask) {}
	}
	for _, q := range held {
		l.used[q] += n
	}
	return queues, n, func(tasks []*pb.LeasedTask) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, q := range held {
			l.used[q] -= n
		}
		for _, t := range tasks {
			if _, ok := l.limit[t.GetQueue()]; ok {
				l.used[t.GetQueue()]++
			}
		}
		l.signal()
	}
}

// nextQueues are the queues a settle of a task of queue may lease the next task from.
func (l *queueLimits) nextQueues(all []string, queue string) []string {
	if l == nil {
		return all
	}
	if _, ok := l.limit[queue]; ok {
		return []string{queue}
	}
	var qs []string
	for _, q := range all {
		if _, ok := l.limit[q]; !ok {
			qs = append(qs, q)
		}
	}
	return qs
}

// pass counts a finished task of queue out and the tasks its settle leased in.
func (l *queueLimits) pass(queue string, next []*pb.LeasedTask) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.limit[queue]; ok {
		l.used[queue]--
	}
	for _, t := range next {
		if _, ok := l.limit[t.GetQueue()]; ok {
			l.used[t.GetQueue()]++
		}
	}
	l.signal()
}

func (l *queueLimits) signal() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// wait is a channel that receives when a limited queue's slot may have come free.
func (l *queueLimits) wait() <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.freed
}
