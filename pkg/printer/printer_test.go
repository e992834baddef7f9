package printer

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// row and result stand for a command's result: a struct with JSON tags,
// a list of rows under one field.
type row struct {
	Name  string `json:"name"`
	Power string `json:"power,omitempty"`
	Level int    `json:"level"`
}

type result struct {
	Nodes []row  `json:"nodes"`
	Note  string `json:"note,omitempty"`
}

func testDoc(v any, rows string) Doc {
	return Doc{Kind: "Test", Value: v, Rows: rows, NameKind: "Node", Names: []string{"a", "b"},
		Text: func(w io.Writer, o TextOptions) error {
			if !o.NoHeaders {
				fmt.Fprintln(w, "HEADER")
			}
			_, err := fmt.Fprintf(w, "text wide=%v\n", o.Wide)
			return err
		}}
}

func TestPrint(t *testing.T) {
	res := result{Nodes: []row{{Name: "a", Power: "on", Level: 1}, {Name: "b", Level: 2}}}
	list := []row{{Name: "a", Power: "off", Level: 1}}
	cases := []struct {
		name      string
		format    string
		noHeaders bool
		value     any
		rows      string
		want      string
	}{
		{"default text", "", false, res, "nodes", "HEADER\ntext wide=false\n"},
		{"text", "text", false, res, "nodes", "HEADER\ntext wide=false\n"},
		{"wide", "wide", false, res, "nodes", "HEADER\ntext wide=true\n"},
		{"no headers", "", true, res, "nodes", "text wide=false\n"},
		// The struct's own field order and names, kubectl's indentation.
		{"json", "json", false, res, "nodes", "{\n    \"nodes\": [\n        {\n            \"name\": \"a\",\n            \"power\": \"on\",\n            \"level\": 1\n        },\n        {\n            \"name\": \"b\",\n            \"level\": 2\n        }\n    ]\n}\n"},
		{"json of a list stays a list", "json", false, list, "", "[\n    {\n        \"name\": \"a\",\n        \"power\": \"off\",\n        \"level\": 1\n    }\n]\n"},
		{"yaml", "yaml", false, list, "", "- level: 1\n  name: a\n  power: \"off\"\n"},
		{"name", "name", false, res, "nodes", "node/a\nnode/b\n"},
		{"jsonpath", "jsonpath={.nodes[*].name}", false, res, "nodes", "a b"},
		{"jsonpath filter", `jsonpath={.nodes[?(@.level==2)].name}`, false, res, "nodes", "b"},
		{"jsonpath of a list", "jsonpath={[*].power}", false, list, "", "off"},
		{"go-template", `go-template={{range .nodes}}{{.name}};{{end}}`, false, res, "nodes", "a;b;"},
		{"go-template of a list: .items", `go-template={{range .items}}{{.power}}{{end}}`, false, list, "", "off"},
		{"custom-columns", "custom-columns=NODE:.name,POWER:{.power},LEVEL:.level", false, res, "nodes",
			"NODE  POWER   LEVEL\na     on      1\nb     <none>  2\n"},
		{"custom-columns no headers", "custom-columns=NODE:.name", true, res, "nodes", "a\nb\n"},
		{"custom-columns of a list", "custom-columns=NODE:.name", false, list, "", "NODE\na\n"},
		{"custom-columns of one object", "custom-columns=NAME:.name", false, row{Name: "x"}, "", "NAME\nx\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := ForFormat(tc.format)
			f.noHeaders = tc.noHeaders
			var out bytes.Buffer
			if err := f.Print(&out, testDoc(tc.value, tc.rows)); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got\n%q\nwant\n%q", out.String(), tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		format string
		want   string // "" for valid
	}{
		{"", ""}, {"text", ""}, {"wide", ""}, {"json", ""}, {"yaml", ""}, {"name", ""},
		{"jsonpath={.a}", ""}, {"go-template={{.a}}", ""}, {"custom-columns=A:.a", ""},
		{"xml", `output format "xml": want text (default), wide,`},
		{"jsonpath={.a", "error parsing jsonpath"},
		{"jsonpath", "no template given"},
		{"custom-columns=", "custom-columns: want HEADER:PATH"},
		{"custom-columns=A", `custom-columns: "A": want HEADER:PATH`},
		{"custom-columns=A:{.a", "custom-columns: A:"},
	}
	for _, tc := range cases {
		t.Run(tc.format, func(t *testing.T) {
			err := ForFormat(tc.format).Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
