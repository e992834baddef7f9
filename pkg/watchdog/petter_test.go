package watchdog

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"fenced.io/fenced/internal/testbed/poll"
)

// fakeDevice records what is done to it.
type fakeDevice struct {
	mu                 sync.Mutex
	opened             time.Time
	pets               []time.Time
	disarmed, closed   bool
	afterDisarmOrClose int // pets after either
}

func (d *fakeDevice) Pet() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pets = append(d.pets, time.Now())
	if d.disarmed || d.closed {
		d.afterDisarmOrClose++
	}
	return nil
}
func (d *fakeDevice) Disarm() error { d.mu.Lock(); defer d.mu.Unlock(); d.disarmed = true; return nil }
func (d *fakeDevice) Close() error  { d.mu.Lock(); defer d.mu.Unlock(); d.closed = true; return nil }

func (d *fakeDevice) petCount() int { d.mu.Lock(); defer d.mu.Unlock(); return len(d.pets) }

func (d *fakeDevice) lastPet() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pets) == 0 {
		return time.Time{}
	}
	return d.pets[len(d.pets)-1]
}

// scriptedOrders answers each read with the next of its answers (the last
// one for ever), and records when each read was asked and answered.
type scriptedOrders struct {
	mu       sync.Mutex
	answers  []error // nil: no order; errOrder: an order; else that error
	asked    []time.Time
	answered []time.Time
	block    bool // every read hangs until its context ends
}

var errOrder = errors.New("order")

func (o *scriptedOrders) Ordered(ctx context.Context) (bool, error) {
	o.mu.Lock()
	o.asked = append(o.asked, time.Now())
	n := min(len(o.asked), len(o.answers)) - 1
	a, block := o.answers[n], o.block && len(o.asked) > 1
	o.mu.Unlock()
	if block {
		<-ctx.Done()
		return false, ctx.Err()
	}
	defer func() { o.mu.Lock(); o.answered = append(o.answered, time.Now()); o.mu.Unlock() }()
	switch a {
	case nil:
		return false, nil
	case errOrder:
		return true, nil
	}
	return false, a
}

func (o *scriptedOrders) reads() (asked, answered []time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Time(nil), o.asked...), append([]time.Time(nil), o.answered...)
}

const testConfirm = 400 * time.Millisecond

func startPetter(t *testing.T, orders Orders) (*Petter, *fakeDevice, chan error, context.CancelFunc) {
	t.Helper()
	dev := &fakeDevice{}
	p := &Petter{Confirm: testConfirm, ReadEvery: testConfirm / 4, PetEvery: 10 * time.Millisecond,
		Open: func() (Pettable, error) {
			dev.mu.Lock()
			dev.opened = time.Now()
			dev.mu.Unlock()
			return dev, nil
		},
		Orders: orders, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, dev, done, cancel
}

// TestPetterPetsWhileNoOrder: the device is opened only after a read found
// no order, then petted.
func TestPetterPetsWhileNoOrder(t *testing.T) {
	orders := &scriptedOrders{answers: []error{nil}}
	_, dev, _, _ := startPetter(t, orders)
	poll.Until(t, 10*time.Second, "five pets", func() bool { return dev.petCount() >= 5 })
	_, answered := orders.reads()
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if dev.opened.Before(answered[0]) {
		t.Errorf("the device was opened at %s, before the first read found no order at %s: opening may pet it", dev.opened, answered[0])
	}
}

// TestPetterStopsForGoodOnAnOrder: once a read finds an order nothing is
// petted again, the device is neither disarmed nor closed, and Run says
// so.
func TestPetterStopsForGoodOnAnOrder(t *testing.T) {
	orders := &scriptedOrders{answers: []error{nil, nil, errOrder}}
	_, dev, done, _ := startPetter(t, orders)
	var err error
	poll.Until(t, 10*time.Second, "Run to return", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	done <- err // for the cleanup
	if !errors.Is(err, ErrOrdered) {
		t.Fatalf("Run returned %v, want ErrOrdered", err)
	}
	_, answered := orders.reads()
	if last := dev.lastPet(); !last.Before(answered[2]) {
		t.Errorf("petted at %s, after the order was read at %s", last, answered[2])
	}
	if dev.disarmed || dev.closed {
		t.Errorf("the device was disarmed (%v) or closed (%v): it must stay armed", dev.disarmed, dev.closed)
	}
}

// TestPetterLapsesWithoutTheAPI: reads that fail, or hang, stop the
// petting T after the start of the last read that found no order.
func TestPetterLapsesWithoutTheAPI(t *testing.T) {
	for _, tc := range []struct {
		name   string
		orders *scriptedOrders
	}{
		{"reads fail", &scriptedOrders{answers: []error{nil, errors.New("connection refused")}}},
		{"reads hang", &scriptedOrders{answers: []error{nil}, block: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, dev, _, _ := startPetter(t, tc.orders)
			poll.Until(t, 10*time.Second, "a read that found no order", func() bool {
				_, answered := tc.orders.reads()
				return len(answered) > 0
			})
			asked, _ := tc.orders.reads()
			// Long past the lapse, with pets every 10 ms had they gone on.
			lapse := asked[0].Add(testConfirm)
			poll.Until(t, 10*time.Second, "well past the lapse", func() bool { return time.Now().After(lapse.Add(5 * testConfirm)) })
			if last := dev.lastPet(); last.IsZero() || !last.Before(lapse) {
				t.Errorf("last pet at %s; the only confirmation's read was asked at %s, so the petting must end before %s", last, asked[0], lapse)
			}
		})
	}
}

// TestPetterDisarmAndStop: Disarm uses the magic close and ends the pets;
// a Run that ends otherwise closes the device and leaves it armed.
func TestPetterDisarmAndStop(t *testing.T) {
	t.Run("disarm", func(t *testing.T) {
		p, dev, _, _ := startPetter(t, &scriptedOrders{answers: []error{nil}})
		poll.Until(t, 10*time.Second, "a pet", func() bool { return dev.petCount() > 0 })
		if err := p.Disarm(); err != nil {
			t.Fatal(err)
		}
		n := dev.petCount()
		poll.Until(t, 10*time.Second, "a while after the disarm", func() bool { return time.Since(dev.lastPet()) > 10*p.PetEvery })
		if !dev.disarmed || dev.petCount() != n {
			t.Errorf("disarmed %v, %d pets after it", dev.disarmed, dev.petCount()-n)
		}
	})
	t.Run("stop", func(t *testing.T) {
		_, dev, done, cancel := startPetter(t, &scriptedOrders{answers: []error{nil}})
		poll.Until(t, 10*time.Second, "a pet", func() bool { return dev.petCount() > 0 })
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		done <- nil // for the cleanup
		if !dev.closed || dev.disarmed || dev.afterDisarmOrClose != 0 {
			t.Errorf("closed %v, disarmed %v, pets after %d: want closed, armed, none", dev.closed, dev.disarmed, dev.afterDisarmOrClose)
		}
	})
}
