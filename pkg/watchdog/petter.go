package watchdog

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Orders reads the API server for a fence order of this node's boot.
type Orders interface {
	// Ordered reports whether a fence order for this node's boot exists,
	// read from the API server now (a linearizable read, never a cache).
	Ordered(ctx context.Context) (bool, error)
}

// Pettable is an open watchdog device (a *Device).
type Pettable interface {
	Pet() error
	Disarm() error
	Close() error
}

// ErrOrdered is returned by Petter.Run when a read found a fence order for
// this boot: the petting has stopped, and the watchdog resets the machine.
var ErrOrdered = errors.New("a fence order for this boot exists: stopped petting the watchdog, the machine resets")

// Petter is the agent's watchdog loop: it reads the API for a fence order
// every ReadEvery and pets the device every PetEvery while its Confirmer
// allows. The device is opened only when petting is allowed (opening may
// pet it).
type Petter struct {
	// Confirm is T (Confirmer.Confirm).
	Confirm time.Duration
	// ReadEvery is how often the API is read; a third of Confirm leaves
	// two reads to fail before the petting lapses.
	ReadEvery time.Duration
	// PetEvery is how often the device is petted while allowed.
	PetEvery time.Duration
	// Open opens the watchdog device.
	Open func() (Pettable, error)
	// Armed, when set, is called once the device is open (armed), with it:
	// from then on the machine resets unless it is petted.
	Armed  func(Pettable)
	Orders Orders
	Log    *slog.Logger
	// Now is the clock; time.Now (monotonic) unless a test sets it.
	Now func() time.Time

	mu        sync.Mutex
	confirmer Confirmer
	dev       Pettable
	disarmed  bool
}

// Run reads and pets until ctx ends (nil: the device is closed without the
// magic close and stays armed — an agent stopping for any reason but an
// announced clean shutdown leaves its machine to the watchdog), or a read
// finds an order (ErrOrdered: the device stays open, unpetted).
func (p *Petter) Run(ctx context.Context) error {
	if p.Now == nil {
		p.Now = time.Now
	}
	p.mu.Lock()
	p.confirmer.Confirm = p.Confirm
	p.mu.Unlock()
	ordered := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		p.readLoop(ctx, ordered)
	}()
	defer readers.Wait()

	pet := time.NewTicker(p.PetEvery)
	defer pet.Stop()
	for {
		select {
		case <-ctx.Done():
			p.close()
			return nil
		case <-ordered:
			p.Log.Error("fence order for this boot found: stopped petting the watchdog; the machine resets when it fires")
			return ErrOrdered
		case <-pet.C:
			p.petIfAllowed()
		}
	}
}

// readLoop reads the API for an order every ReadEvery, closing ordered
// when one is found.
func (p *Petter) readLoop(ctx context.Context, ordered chan<- struct{}) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		r := p.confirmer.ReadStarted(p.Now())
		p.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, p.Confirm)
		found, err := p.Orders.Ordered(rctx)
		cancel()
		p.mu.Lock()
		switch {
		case err != nil:
			until := p.confirmer.until
			p.mu.Unlock()
			p.Log.Warn("cannot read the API for a fence order; the watchdog is petted only until the last confirmation lapses",
				"err", err, "lapsesIn", until.Sub(p.Now()).Round(time.Millisecond))
		case found:
			p.confirmer.Ordered()
			p.mu.Unlock()
			close(ordered)
			return
		default:
			p.confirmer.NoOrder(r)
			p.mu.Unlock()
		}
		t.Reset(p.ReadEvery)
	}
}

// petIfAllowed opens the device if need be and pets it, when the last
// confirmation allows.
func (p *Petter) petIfAllowed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.disarmed || !p.confirmer.MayPet(p.Now()) {
		return
	}
	if p.dev == nil {
		d, err := p.Open()
		if err != nil {
			p.Log.Error("cannot open the watchdog device", "err", err)
			return
		}
		p.dev = d
		if p.Armed != nil {
			p.Armed(d)
		}
	}
	if err := p.dev.Pet(); err != nil {
		p.Log.Error("cannot pet the watchdog", "err", err)
	}
}

// Disarm stops the watchdog with the magic close and stops the petting:
// for a clean shutdown, once the agent has announced it.
func (p *Petter) Disarm() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.disarmed = true
	if p.dev == nil {
		return nil
	}
	err := p.dev.Disarm()
	p.dev = nil
	return err
}

// close closes the device without the magic close.
func (p *Petter) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dev != nil {
		_ = p.dev.Close()
		p.dev = nil
	}
}
