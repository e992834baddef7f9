package admin

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"fenced.io/fenced/pkg/metrics"
)

// agentTimeout bounds the scrape of an agent's /metrics: the agent is an
// extra view, never worth making an operator wait for.
const agentTimeout = 5 * time.Second

// AgentView is what one agent's /metrics says about the ring and the nodes.
//
// Agents do not export the gossip state of each member, only how many
// members are in each state (fenced_members) and, on fencers, each node's
// decision phase (fenced_node_state), which folds gossip in with the
// Kubernetes view. So per node, Phases is the closest thing to a gossip view
// there is, and only for nodes a fencer tracks.
type AgentView struct {
	// URL is the metrics endpoint that was read.
	URL string `json:"url"`
	// Members counts ring members by state (alive, suspect, dead, left).
	Members map[string]int `json:"members,omitempty"`
	// Phases is the fencer's decision phase per node name.
	Phases map[string]string `json:"phases,omitempty"`
	// LevelsReady is, per node, how many of its fencing levels answered the
	// fencer's last device check (0: it cannot be fenced automatically).
	LevelsReady map[string]int `json:"levelsReady,omitempty"`
	// Error says why the agent could not be read; the other fields are
	// empty then.
	Error string `json:"error,omitempty"`
	// Paused and DryRun: the agent's fencer reports the cluster-wide pause
	// (fenced_paused) or runs with policy.dryRun (fenced_dry_run).
	Paused bool `json:"paused,omitempty"`
	DryRun bool `json:"dryRun,omitempty"`
}

// ReadAgent scrapes an agent's metrics endpoint. rawURL may name the agent
// ("http://10.0.0.5:9740") or its /metrics path.
func ReadAgent(ctx context.Context, rawURL string) (*AgentView, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("agent URL %q: want http://HOST:PORT[/metrics]", rawURL)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	// Ask for the plain text format: it is what the parser reads, whatever
	// the agent's client library would prefer to send.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading agent metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading agent metrics at %s: %s", u, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing agent metrics at %s: %w", u, err)
	}
	v := &AgentView{URL: u.String(), Members: map[string]int{}, Phases: map[string]string{}, LevelsReady: map[string]int{}}
	if f, ok := fams[metrics.LevelsReadyMetric]; ok {
		for _, m := range f.GetMetric() {
			v.LevelsReady[label(m, "node")] = int(m.GetGauge().GetValue())
		}
	}
	if f, ok := fams[metrics.MembersMetric]; ok {
		for _, m := range f.GetMetric() {
			v.Members[label(m, "state")] = int(m.GetGauge().GetValue())
		}
	}
	gaugeOne := func(name string) bool {
		f, ok := fams[name]
		return ok && len(f.GetMetric()) > 0 && f.GetMetric()[0].GetGauge().GetValue() == 1
	}
	v.Paused, v.DryRun = gaugeOne(metrics.PausedMetric), gaugeOne(metrics.DryRunMetric)
	if f, ok := fams[metrics.NodeStateMetric]; ok {
		for _, m := range f.GetMetric() {
			if m.GetGauge().GetValue() == 1 {
				v.Phases[label(m, "node")] = label(m, "state")
			}
		}
	}
	return v, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// MembersText is the ring summary, e.g. "4 alive, 1 dead".
func (v *AgentView) MembersText() string {
	if len(v.Members) == 0 {
		return "no " + metrics.MembersMetric + " metric"
	}
	states := slices.Sorted(maps.Keys(v.Members))
	parts := make([]string, 0, len(states))
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%d %s", v.Members[s], s))
	}
	return strings.Join(parts, ", ")
}
