package heartbeat

import "sync"

// eventBuffer is the capacity of the channel Events returns. Events that do
// not fit wait in the coalescing queue, so this only smooths bursts.
const eventBuffer = 64

// eventQueue hands member changes from memberlist's callbacks to the
// consumer of Events without ever blocking the callbacks: those run with
// memberlist's node lock held, and a blocked callback would stall gossip
// and failure detection for the whole agent.
//
// Instead of dropping events when the consumer falls behind, the queue
// coalesces them per member: a member with an undelivered change keeps
// one slot, updated to its latest state. The queue is therefore bounded
// by the number of members, and the consumer always sees the latest state
// of every member that changed (in the order the members first changed),
// possibly without the intermediate states of a member that changed
// several times meanwhile. Events are level-triggered: treat each one as
// "this member now looks like this".
type eventQueue struct {
	mu      sync.Mutex
	order   []string          // names with a pending change, oldest first
	pending map[string]Member // latest undelivered state per name
	wake    chan struct{}     // capacity 1: "pending is not empty"
	out     chan Member
}

func newEventQueue() *eventQueue {
	return &eventQueue{
		pending: make(map[string]Member),
		wake:    make(chan struct{}, 1),
		out:     make(chan Member, eventBuffer),
	}
}

// push records m as the latest change of its member. It never blocks.
func (q *eventQueue) push(m Member) {
	q.mu.Lock()
	if _, ok := q.pending[m.Name]; !ok {
		q.order = append(q.order, m.Name)
	}
	q.pending[m.Name] = m
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// pop removes and returns the oldest pending change.
func (q *eventQueue) pop() (Member, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return Member{}, false
	}
	name := q.order[0]
	q.order[0] = ""
	q.order = q.order[1:]
	m := q.pending[name]
	delete(q.pending, name)
	return m, true
}

// run delivers pending changes to out until done is closed, then closes
// out. Changes still pending at that point are discarded.
func (q *eventQueue) run(done <-chan struct{}) {
	defer close(q.out)
	for {
		m, ok := q.pop()
		if !ok {
			select {
			case <-q.wake:
				continue
			case <-done:
				return
			}
		}
		select {
		case q.out <- m:
		case <-done:
			return
		}
	}
}
