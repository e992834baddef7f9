package admin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/fencing/core"
	"fenced.io/fenced/pkg/printer"
	"fenced.io/fenced/pkg/taint"
)

// bmcParallel caps concurrent BMC sessions of one Status, so a large
// inventory does not open hundreds of sessions on the management network
// at once.
const bmcParallel = 16

// Taint column values.
const (
	TaintFenced    = "fenced"    // out-of-service taint applied by fenced
	TaintOther     = "other"     // out-of-service taint applied by someone else
	TaintReturning = "returning" // out-of-service taint off, fenced.io/returning on until the controller-manager saw that
)

// StatusOptions are the inputs of Status.
type StatusOptions struct {
	// AgentURL is an agent's metrics endpoint; empty: no agent view.
	AgentURL string
	// BMCTimeout bounds each BMC read, retries included. Zero: no bound
	// of Status's own — each BMC's configured timeout per attempt and
	// retries bound its read, as they bound the agent's reads (bmc.timeout,
	// bmc.retries: device.DefaultBMCTimeout, device.DefaultBMCRetries).
	BMCTimeout time.Duration
}

// NodeStatus is one row of `fenced status`.
type NodeStatus struct {
	Name string `json:"name"`
	// Ready is the Ready condition's status ("True", "False", "Unknown"),
	// empty when the node has none; ReadySince its last transition.
	Ready      string     `json:"ready,omitempty"`
	ReadySince *time.Time `json:"readySince,omitempty"`
	// Phase is the decision phase the --agent fencer reports for the node
	// (fenced_node_state); empty when unknown (see AgentView).
	Phase string `json:"phase,omitempty"`
	// Gossip is Phase under its first, wrong name (it never was the gossip
	// state): kept for the scripts that read it. Deprecated: read phase.
	Gossip string `json:"gossip,omitempty"`
	// Power is "on", "off" or "unknown" when the node is in the BMC
	// inventory, empty otherwise. A failed read has PowerErrorKind
	// (timeout, unreachable, auth, bmc-error, ...) and PowerError.
	Power string `json:"power,omitempty"`
	// LevelsReady is how many of the node's fencing levels answered the
	// --agent fencer's last device check; nil when unknown.
	LevelsReady    *int   `json:"levelsReady,omitempty"`
	PowerErrorKind string `json:"powerErrorKind,omitempty"`
	PowerError     string `json:"powerError,omitempty"`
	BMCEndpoint    string `json:"bmcEndpoint,omitempty"`
	// Taint is TaintFenced, TaintOther, TaintReturning or empty; TaintedSince is the
	// taint's timeAdded.
	Taint        string     `json:"taint,omitempty"`
	TaintedSince *time.Time `json:"taintedSince,omitempty"`
	// Evidence is what fenced recorded for its taint.
	Evidence *core.Evidence `json:"evidence,omitempty"`
	BootID   string         `json:"bootID,omitempty"`
	// NewerEvidenceFormat is, instead of Evidence, the format of evidence
	// a newer fenced recorded, which this one does not read.
	NewerEvidenceFormat int `json:"newerEvidenceFormat,omitempty"`
	// Watchdog is the node's watchdog level as the API shows it; nil when
	// it shows nothing (watchdog.go).
	Watchdog *WatchdogStatus `json:"watchdog,omitempty"`
	// Excluded is the label that excludes the node from fencing
	// (taint.ExcludeLabel or taint.Medik8sExcludeLabel, value "true"): no
	// fencer reads its power, taints it or switches it. Empty otherwise.
	Excluded string `json:"excluded,omitempty"`
}

// Status is the result of `fenced status`.
type Status struct {
	Nodes []NodeStatus `json:"nodes"`
	// Agent is the --agent view, if one was asked for.
	Agent *AgentView `json:"agent,omitempty"`
	// Fencing is whether fencing is armed, as the API shows it.
	Fencing *FencingView `json:"fencing,omitempty"`
}

// Status reads every Node, the agent's metrics if asked, and the power state
// of every inventoried node (concurrently, each bounded as StatusOptions.BMCTimeout says). It
// only reads; a BMC or agent that fails shows as such in its cell.
func (o *Operator) Status(ctx context.Context, opts StatusOptions) (*Status, error) {
	list, err := o.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	s := &Status{Nodes: make([]NodeStatus, len(list.Items))}
	if opts.AgentURL != "" {
		if s.Agent, err = ReadAgent(ctx, opts.AgentURL); err != nil {
			s.Agent = &AgentView{URL: opts.AgentURL, Error: err.Error()}
		}
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	// fenced's Leases: the fencers' states, the agents' key Leases (armed
	// statements) and the fence orders.
	var leases []coordinationv1.Lease
	ll, leasesErr := o.Client.CoordinationV1().Leases(o.LeaseNamespace).List(ctx, metav1.ListOptions{})
	if leasesErr == nil {
		leases = ll.Items
	}
	byName := make(map[string]*coordinationv1.Lease, len(leases))
	for i := range leases {
		byName[leases[i].Name] = &leases[i]
	}
	for i := range list.Items {
		s.Nodes[i] = nodeStatus(&list.Items[i], s.Agent)
		s.Nodes[i].Watchdog = watchdogOf(byName, s.Nodes[i])
	}
	s.Fencing = o.fencingView(ctx, list.Items, leases, leasesErr)
	o.readPower(ctx, s.Nodes, opts.BMCTimeout)
	return s, nil
}

func nodeStatus(n *corev1.Node, agent *AgentView) NodeStatus {
	ns := NodeStatus{Name: n.Name, BootID: n.Status.NodeInfo.BootID, Excluded: taint.ExcludedBy(n)}
	if c := taint.ReadyCondition(n); c != nil {
		ns.Ready = string(c.Status)
		if t := c.LastTransitionTime.Time; !t.IsZero() {
			ns.ReadySince = &t
		}
	}
	if agent != nil {
		ns.Phase = agent.Phases[n.Name]
		ns.Gossip = ns.Phase
		if r, ok := agent.LevelsReady[n.Name]; ok {
			ns.LevelsReady = &r
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == taint.TaintKey && t.TimeAdded != nil {
			since := t.TimeAdded.Time
			ns.TaintedSince = &since
		}
	}
	switch {
	case taint.HasTaint(n) && taint.AppliedByFenced(n):
		ns.Taint = TaintFenced
		ev, ok, err := taint.EvidenceOf(n)
		if ok && err == nil {
			ns.Evidence = &ev
		}
		ns.NewerEvidenceFormat = taint.NewerFormat(err)
	case taint.HasTaint(n):
		ns.Taint = TaintOther
	case n.Annotations[taint.AnnotationReturning] != "":
		ns.Taint = TaintReturning
	}
	return ns
}

// readPower fills in the power column of the inventoried nodes.
func (o *Operator) readPower(ctx context.Context, rows []NodeStatus, timeout time.Duration) {
	sem := make(chan struct{}, bmcParallel)
	var wg sync.WaitGroup
	for i := range rows {
		b, endpoint, ok := o.bmc(rows[i].Name)
		if !ok {
			continue
		}
		row := &rows[i]
		row.BMCEndpoint = endpoint
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			state, err := b.PowerState(ctx)
			row.Power = string(state)
			if err != nil {
				row.Power, row.PowerErrorKind, row.PowerError = "unknown", kindOf(err), err.Error()
			}
		})
	}
	wg.Wait()
}

// Doc is s as the printers print it (package printer): one row per node;
// -o name prints node/NAME. now is the reference for the ages in the
// table.
func (s *Status) Doc(now time.Time) printer.Doc {
	names := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		names[i] = n.Name
	}
	return printer.Doc{Kind: "Status", Value: s, Rows: "nodes", NameKind: "Node", Names: names,
		Text: func(w io.Writer, o printer.TextOptions) error { return s.writeTable(w, o, now) }}
}

// writeTable prints s as a table (wider with o.Wide), then whether
// fencing is armed and what the agent said.
func (s *Status) writeTable(w io.Writer, o printer.TextOptions, now time.Time) error {
	wide := o.Wide
	var header []string
	for _, c := range statusColumns {
		if wide || !c.wide {
			header = append(header, c.name)
		}
	}
	tw := o.Table(w, header...)
	for _, n := range s.Nodes {
		var cells []string
		for _, c := range statusColumns {
			if wide || !c.wide {
				cells = append(cells, c.cell(n, now))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Fencing != nil {
		fmt.Fprintf(w, "\n%s\n", s.Fencing.Text(now))
	}
	if a := s.Agent; a != nil {
		if a.Error != "" {
			fmt.Fprintf(w, "\nagent: %s (PHASE and LEVELS show -)\n", a.Error)
		} else {
			fmt.Fprintf(w, "\nagent %s: gossip ring %s\n", a.URL, a.MembersText())
			if a.Paused {
				fmt.Fprintf(w, "fencing PAUSED cluster-wide (ConfigMap %s, key %s): no taint, no Node write, no power action\n", taint.PauseConfigMap, taint.PauseKey)
			}
			if a.DryRun {
				fmt.Fprintln(w, "this fencer runs in dry-run (policy.dryRun): it reports what it would do and changes nothing")
			}
		}
	}
	return nil
}

// statusColumn is one column of the table: its name, whether only -o wide
// shows it, what its --help says, and its cell. The table and the help are
// both made from statusColumns, so that the help lists every column printed.
type statusColumn struct {
	name string
	wide bool
	help string
	cell func(NodeStatus, time.Time) string
}

var statusColumns = []statusColumn{
	{name: "NAME", help: "the Node", cell: func(n NodeStatus, _ time.Time) string { return n.Name }},
	{name: "READY", help: `its Ready condition and for how long ("False 3m")`, cell: readyCell},
	{name: "PHASE", help: "the decision phase (Healthy, Suspect, Confirming, PoweringOff, Fenced,\n" +
		"Recovering, Returning) that the fencer at --agent reports for the node in its\n" +
		"fenced_node_state metric; \"-\" without --agent, or for a node that fencer does\n" +
		"not track (-o json: phase; gossip, its old name, says the same)",
		cell: func(n NodeStatus, _ time.Time) string { return dash(n.Phase) }},
	{name: "POWER", help: "read from the node's BMC when it is in the inventory (--config): on,\n" +
		"off, or the kind of failure (timeout, unreachable, auth, bmc-error); \"-\" when\n" +
		"not in the inventory. All BMCs are read concurrently, each as the agent reads\n" +
		"it (bmc.timeout per attempt, bmc.retries), or within --bmc-timeout when given",
		cell: func(n NodeStatus, _ time.Time) string { return powerCell(n) }},
	{name: "LEVELS", help: "how many of the node's fencing levels answered the --agent fencer's\n" +
		"last device check; \"0 (cannot fence)\" when none did; \"-\" without --agent",
		cell: func(n NodeStatus, _ time.Time) string { return levelsCell(n) }},
	{name: "TAINT", help: "the out-of-service taint: fenced (applied by fenced), other (by someone\n" +
		"else, fenced never removes it), returning (fenced took it off and keeps\n" +
		"fenced.io/returning until the controller-manager has seen that), or -",
		cell: func(n NodeStatus, _ time.Time) string { return dash(n.Taint) }},
	{name: "EVIDENCE", help: "what fenced recorded for its taint: method and who",
		cell: func(n NodeStatus, _ time.Time) string { return evidenceCell(n) }},
	{name: "SINCE", help: "how long the taint has been there", cell: sinceCell},
	{name: "FENCING", help: "excluded when an exclusion label keeps fenced away from the node\n" +
		"(fenced exclude; -o json names the label), else -",
		cell: func(n NodeStatus, _ time.Time) string { return fencingCell(n) }},
	{name: "WATCHDOG", wide: true, help: "the watchdog level: armed TIMEOUT/CONFIRM when the node's agent\n" +
		"stated its watchdog armed for the boot it runs, signed with its key (SOFTWARE:\n" +
		"a software watchdog), refused when a statement is not believed (-o json: why),\n" +
		"ordered when a fence order stands for that boot (its watchdog resets it); -\n" +
		"when none of these",
		cell: func(n NodeStatus, _ time.Time) string { return watchdogCell(n) }},
	{name: "BOOT-ID", wide: true, help: "the boot ID the node reports",
		cell: func(n NodeStatus, _ time.Time) string { return dash(n.BootID) }},
	{name: "BMC", wide: true, help: "the node's BMC endpoint in the inventory",
		cell: func(n NodeStatus, _ time.Time) string { return dash(n.BMCEndpoint) }},
	{name: "REASON", wide: true, help: "the reason recorded in the evidence",
		cell: func(n NodeStatus, _ time.Time) string {
			if n.Evidence == nil {
				return "-"
			}
			return dash(n.Evidence.Reason)
		}},
}

// StatusColumnsHelp lists every column of `fenced status` for its --help,
// those of -o wide marked, each help wrapped to fit a terminal.
func StatusColumnsHelp() string {
	var b strings.Builder
	for _, c := range statusColumns {
		name := c.name
		if c.wide {
			name += " (wide)"
		}
		// Wrapped here, so that the help strings need not be.
		line := ""
		for _, word := range strings.Fields(c.help) {
			if line != "" && len(line)+1+len(word) > 60 {
				fmt.Fprintf(&b, "  %-18s%s\n", name, line)
				name, line = "", ""
			}
			line = strings.TrimPrefix(line+" "+word, " ")
		}
		fmt.Fprintf(&b, "  %-18s%s\n", name, line)
	}
	return b.String()
}

func readyCell(n NodeStatus, now time.Time) string {
	if n.Ready == "" {
		return "-"
	}
	if n.ReadySince == nil {
		return n.Ready
	}
	return n.Ready + " " + age(*n.ReadySince, now)
}

func powerCell(n NodeStatus) string {
	if n.PowerErrorKind != "" {
		return n.PowerErrorKind
	}
	return dash(n.Power)
}

// levelsCell is how many fencing levels answer; "0 (cannot fence)" says
// that a failure of this node would need a person.
func levelsCell(n NodeStatus) string {
	switch {
	case n.LevelsReady == nil:
		return "-"
	case *n.LevelsReady == 0:
		return "0 (cannot fence)"
	}
	return strconv.Itoa(*n.LevelsReady)
}

func evidenceCell(n NodeStatus) string {
	switch {
	case n.Taint != TaintFenced:
		return "-"
	case n.NewerEvidenceFormat > 0:
		return fmt.Sprintf("format %d (newer fenced)", n.NewerEvidenceFormat)
	case n.Evidence == nil:
		return "unreadable"
	case n.Evidence.By == "":
		return string(n.Evidence.Method)
	}
	return string(n.Evidence.Method) + " by " + n.Evidence.By
}

// fencingCell says whether fenced may act on the node: "excluded" (by
// which label, in -o wide's json/yaml) or "-".
func fencingCell(n NodeStatus) string {
	if n.Excluded != "" {
		return "excluded"
	}
	return "-"
}

func sinceCell(n NodeStatus, now time.Time) string {
	if n.TaintedSince == nil {
		return "-"
	}
	return age(*n.TaintedSince, now)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// NodeNames lists the names of the cluster's Nodes, sorted: what shell
// completion offers for a NODE argument.
func NodeNames(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, len(list.Items))
	for i, n := range list.Items {
		names[i] = n.Name
	}
	sort.Strings(names)
	return names, nil
}
