package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// problemsOf parses file and returns its problems, one line each, as
// Problem.Error words them.
func problemsOf(t *testing.T, file string) []string {
	t.Helper()
	_, err := Parse([]byte(file), "test.yaml")
	if err == nil {
		return nil
	}
	var cerr *Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Parse error %v is not a *config.Error", err)
	}
	var out []string
	for _, p := range cerr.Problems {
		out = append(out, p.Error())
	}
	return out
}

// TestDecodeProblems: every mistake of a file's keys and values' kinds is
// one line naming its path in the file's words, its line, and, for a key
// that is close to a known one, that key; never a Go type.
func TestDecodeProblems(t *testing.T) {
	pw := writePassword(t, "s3cret\n")
	node := "bmc:\n  nodes:\n    - {name: node-a, protocol: ipmi, address: x, username: u, passwordFile: " + pw + "}\n"
	cases := []struct {
		name string
		yaml string
		want []string // the problems, exactly, in order
	}{
		{"key in another case", header + "bmc:\n  defaults:\n    PASSWORDFILE: " + pw + "\n    UserName: u\n",
			[]string{"line 5: bmc.defaults.PASSWORDFILE: keys are case-sensitive; did you mean passwordFile?",
				"line 6: bmc.defaults.UserName: keys are case-sensitive; did you mean username?"}},
		{"a field twice in two cases", header + "clusterName: a\nclustername: b\n",
			[]string{"line 4: clustername: keys are case-sensitive; did you mean clusterName? (clusterName is already set at line 3)"}},
		{"duplicate key", header + "policy:\n  mode: power-off\n  mode: confirm-only\n",
			[]string{"line 5: policy.mode: duplicate key; already set at line 4"}},
		{"duplicate map key", header + "fenceDevices:\n  - name: pdu\n    agent: fence_x\n    plugs: {node-a: \"1\", node-a: \"2\"}\n",
			[]string{"line 6: fenceDevices[0].plugs.node-a: duplicate key; already set at line 6"}},
		{"typo with suggestion", header + "bmc:\n  defaults:\n    pasword: x\n",
			[]string{"line 5: bmc.defaults.pasword: unknown field; did you mean password?"}},
		{"swapped letters", header + "policy: {fenceAftre: 30s}\n",
			[]string{"line 3: policy.fenceAftre: unknown field; did you mean fenceAfter?"}},
		{"nothing close", header + "policy: {colour: blue}\n", []string{"line 3: policy.colour: unknown field"}},
		{"number for a duration", header + "policy:\n  fenceAfter: 30\n",
			[]string{`line 4: policy.fenceAfter: want a duration like "30s", got the number 30`}},
		{"unparsable duration", header + "fencer: {leaseDuration: soon}\n",
			[]string{`line 3: fencer.leaseDuration: want a duration like "30s" or "1m30s", got "soon"`}},
		{"string for a number", header + "gossip: {port: \"7946\"}\n", []string{`line 3: gossip.port: want a whole number, got "7946"`}},
		{"number for a string", header + "bmc:\n  defaults: {username: 1234}\n",
			[]string{"line 4: bmc.defaults.username: want a string, got the number 1234"}},
		{"YAML 1.1 boolean for a string", header + "policy: {afterFence: off}\n",
			[]string{`line 3: policy.afterFence: want a string, got the boolean off (write "off" in quotes)`}},
		{"list for a mapping", header + "gossip: [a]\n", []string{"line 3: gossip: want a mapping of keys, got a list"}},
		{"mapping for a list", header + "fenceDevices: {a: b}\n", []string{"line 3: fenceDevices: want a list, got a mapping"}},
		{"syntax error", header + "bmc: [\n", []string{"line 3: did not find expected node content"}},
		{"one line per mistake, in file order", header + "clustrName: a\npolicy:\n  fenceAfter: 30\n  Mode: power-off\ngossip: {port: x}\n",
			[]string{"line 3: clustrName: unknown field; did you mean clusterName?",
				`line 5: policy.fenceAfter: want a duration like "30s", got the number 30`,
				"line 6: policy.Mode: keys are case-sensitive; did you mean mode?",
				`line 7: gossip.port: want a whole number, got "x"`}},
		{"merge keys are followed", header + "x-common: &c {protocol: ipmi}\nbmc:\n  defaults: {<<: *c, usernme: u}\n",
			[]string{"line 3: x-common: unknown field", "line 5: bmc.defaults.usernme: unknown field; did you mean username?"}},
		{"a level entry is a name or an object", header + node + "topology:\n  defaults: [[bmc], [{device: bmc, plgu: x}]]\n",
			[]string{"line 7: topology.defaults[1][0].plgu: unknown field; did you mean plug?"}},
		{"valid", header + "clusterName: a\npolicy: {fenceAfter: 30s, afterFence: \"off\", dryRun: yes}\n" + node, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := problemsOf(t, tc.yaml)
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			for _, p := range got {
				if strings.Contains(p, "Spec") || strings.Contains(p, "Go struct") || strings.Contains(p, "metav1") {
					t.Errorf("problem names a Go type: %s", p)
				}
			}
		})
	}
}

// TestBMCDefaultsReportedOnce: a mistake in bmc.defaults is one problem,
// however many nodes inherit it; a node's own mistake stays the node's.
func TestBMCDefaultsReportedOnce(t *testing.T) {
	pw := writePassword(t, "s3cret\n")
	file := header + `bmc:
  defaults: {protocol: ilo, username: u, passwordFile: /nonexistent/pw, timeout: 1h, ipmi: {cipherSuite: 0}}
  nodes:
    - {name: node-a, address: a}
    - {name: node-b, address: b}
    - {name: node-c, address: c, protocol: ipmi, passwordFile: ` + pw + `, port: 70000}
`
	want := []string{
		`line 4: bmc.defaults.protocol: unknown protocol "ilo" (want ipmi or redfish)`,
		"line 4: bmc.defaults.passwordFile: reading password file: open /nonexistent/pw: no such file or directory",
		"line 4: bmc.defaults.timeout: 1h0m0s is out of range (more than 0, at most 5m0s)",
		"line 4: bmc.defaults.ipmi.cipherSuite: 0 authenticates nothing and is refused; use 3 or 17",
		"line 8: bmc.nodes[2].port (node-c): 70000 is not a port (1-65535)",
	}
	if got := problemsOf(t, file); !slices.Equal(got, want) {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestErrorIsOneLinePerProblem: the error's text, as commands print it,
// has one line per problem.
func TestErrorIsOneLinePerProblem(t *testing.T) {
	_, err := Parse([]byte(header+"a: 1\nb: 2\n"), "f.yaml")
	want := "config f.yaml: 2 problems:\n  line 3: a: unknown field\n  line 4: b: unknown field"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
	_, err = Parse([]byte(header+"a: 1\n"), "f.yaml")
	if want := "config f.yaml: line 3: a: unknown field"; err == nil || err.Error() != want {
		t.Errorf("error: %v, want %s", err, want)
	}
}
