package admin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenced.io/fenced/pkg/vocab"
)

// Consent is how a command that can do harm — switch a machine off, fence
// a node on a person's word, take a taint off against the checks — gets the
// go-ahead of the person who runs it: y/N on a terminal, or --yes. Every
// such command (bmc and device off|cycle, confirm, unfence --force, and
// diagnose --fix) goes through it, so they all ask, and refuse, alike.
type Consent struct {
	// Yes answers the question in advance (--yes).
	Yes bool
	// Terminal says In is a terminal a person can answer on.
	Terminal bool
	// In is where the y/N answer is read from.
	In io.Reader
}

// ErrNeedsYes is returned by Consent.Check when nobody can answer y/N and
// --yes was not given: a wrong command line, found before anything is read
// or done (cmd/fenced exits 2 on it). It wraps ErrRefused.
var ErrNeedsYes = fmt.Errorf("%w: standard input is not a terminal, so nobody can answer y/N: pass --yes to go ahead", ErrRefused)

// canAsk reports whether a person can answer the question.
func (c Consent) canAsk() bool { return c.Terminal && c.In != nil }

// Check is the go-ahead's first half, before the command reads or does
// anything: without a terminal, only --yes lets it go on. A script that
// forgot --yes must change nothing, not half of what it asked.
func (c Consent) Check() error {
	if c.Yes || c.canAsk() {
		return nil
	}
	return ErrNeedsYes
}

// Ask asks question on w and gets the person's y/N, or refuses (wrapping
// ErrRefused). The answer is read in the background so that Ctrl-C (which
// cancels ctx) ends the question at once.
func (c Consent) Ask(ctx context.Context, w io.Writer, question string) error {
	if c.Yes {
		return nil
	}
	if !c.canAsk() {
		return ErrNeedsYes
	}
	fmt.Fprintf(w, "%s [y/N] ", question)
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(c.In).ReadString('\n')
		answer <- line
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(w)
		return refused("not confirmed: %v", ctx.Err())
	case line := <-answer:
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return nil
		}
	}
	return refused("not confirmed")
}

// ByHand is what a power action by hand needs from the command line: the
// go-ahead and the operator's --reason.
type ByHand struct {
	// Reason is the operator's --reason, recorded in the Event.
	Reason string
	Consent
}

// About is b for switching node's power (op) through a device: the
// Through of the Event ("its BMC ipmi://…", "fencing level 2"), and
// Command, the command line's name for it ("fenced bmc").
func (b ByHand) About(node string, op PowerOp, through, command string) PowerByHand {
	return PowerByHand{Node: node, Op: op, Through: through, Command: command + " " + string(op), ByHand: b}
}

// PowerByHand is `fenced bmc` or `fenced device` about to switch a node
// off, or off and on again, by hand.
type PowerByHand struct {
	Node    string
	Op      PowerOp
	Through string
	Command string
	ByHand
}

// Harmful reports whether op can do harm, and so needs the operator's
// go-ahead and leaves an Event: off and cycle cut a running machine's
// power; status reads and on switches on what is off.
func Harmful(op PowerOp) bool { return op == PowerOff || op == PowerCycle }

// AllowPower asks the operator to go ahead with a power action by hand and
// records, once they have, a Warning Event on the Node naming who, what and
// why (ManualPowerOff, ManualPowerCycle), before anything is sent: the
// action may take down the API server or the machine this runs on, and the
// record must exist even then. The Event is the trail, not a gate: an API
// server that cannot take it does not stop a person from switching a
// machine (the command says so, and logs it).
func (o *Operator) AllowPower(ctx context.Context, p PowerByHand) error {
	if err := p.Check(); err != nil {
		return err
	}
	user := o.identity(ctx)
	w := o.Out
	fmt.Fprintf(w, "WARNING: this switches node %s %s through %s NOW, without a graceful shutdown and\n"+
		"without any of the fencer's checks. A node that runs loses whatever it had not written.\n", p.Node, opText(p.Op), p.Through)
	fmt.Fprintf(w, "  you: %s (as the API server knows you; recorded in an Event on the Node)\n", user)
	if err := p.Ask(ctx, w, fmt.Sprintf("Switch node %s %s?", p.Node, opText(p.Op))); err != nil {
		return err
	}
	reason := vocab.EventManualPowerOff
	if p.Op == PowerCycle {
		reason = vocab.EventManualPowerCycle
	}
	o.recordOnNode(ctx, p.Node, corev1.EventTypeWarning, reason, "%s switches node %s %s through %s (%s): %s",
		user, p.Node, opText(p.Op), p.Through, p.Command, reasonOr(p.Reason))
	o.log().Warn("power switched by hand", "node", p.Node, "op", string(p.Op), "through", p.Through, "by", user, "reason", p.Reason)
	return nil
}

// opText is op as a sentence says it.
func opText(op PowerOp) string {
	if op == PowerCycle {
		return "off and on again"
	}
	return string(op)
}

// recordOnNode records an Event on the Node named node, which need not
// exist (a BMC in the inventory whose Node was deleted): the Event then
// names it without its UID, as kubectl describe finds it by name. Without
// a Recorder nothing is recorded, and the command says so.
func (o *Operator) recordOnNode(ctx context.Context, node, eventType string, reason vocab.EventReason, format string, args ...any) {
	if o.Recorder == nil {
		fmt.Fprintf(o.Out, "WARNING: no Event recorded (no connection to the API server)\n")
		return
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if o.Client != nil {
		if got, err := o.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			n = got
		}
	}
	o.record(n, eventType, reason, format, args...)
}
