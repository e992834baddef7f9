package heartbeat

import (
	"strconv"
	"testing"
	"time"
)

func TestEventQueueNeverBlocksAndKeepsLatest(t *testing.T) {
	q := newEventQueue()
	// Nobody reads: pushes must still return, and memory stays bounded by
	// the number of members.
	for i := range 10000 {
		q.push(Member{Name: "m" + strconv.Itoa(i%3), Meta: Meta{BootID: strconv.Itoa(i)}})
	}
	if len(q.order) != 3 || len(q.pending) != 3 {
		t.Fatalf("%d pending for 3 members", len(q.pending))
	}
	done := make(chan struct{})
	go q.run(done)
	for _, want := range []struct{ name, boot string }{{"m0", "9999"}, {"m1", "9997"}, {"m2", "9998"}} {
		select {
		case m := <-q.out:
			if m.Name != want.name || m.Meta.BootID != want.boot {
				t.Errorf("got %s/%s, want %s/%s", m.Name, m.Meta.BootID, want.name, want.boot)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no event delivered")
		}
	}
	close(done)
	for range q.out { // closed by run
	}
}
