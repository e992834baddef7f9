package config

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Problem is one mistake in a configuration file, named by its path in the
// file's own words (bmc.nodes[2].address, not a Go type), with the line it
// is on when the decoder knows it.
type Problem struct {
	// Path is empty for a problem of the whole file (its syntax).
	Path string
	// Item names the list item Path is in, when it has a name: the node
	// of bmc.nodes[2], the device of fenceDevices[0].
	Item string
	// Line is 1-based; 0 when unknown.
	Line int
	Msg  string
}

// Error is "line N: path (item): message"; the line, the item or the path
// is left out when unknown (a syntax error has no path).
func (p Problem) Error() string {
	s := p.Msg
	if p.Path != "" {
		where := p.Path
		if p.Item != "" {
			where += " (" + p.Item + ")"
		}
		s = where + ": " + s
	}
	if p.Line > 0 {
		s = fmt.Sprintf("line %d: %s", p.Line, s)
	}
	return s
}

// lines maps the paths of a file (bmc.nodes[0].address) to the line each
// is written on: a key's line, or a list item's first line.
type lines map[string]int

// of is the line of path or, for a setting the file leaves out, of the
// nearest enclosing path it has; 0 when the file has none of them.
func (l lines) of(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if n, ok := l[p]; ok {
			return n
		}
	}
	return 0
}

// parentPath drops the last key or index of a path: a.b[2] is a.b, a.b is a.
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// checkKeys walks the YAML document against the Go types it decodes into
// and returns every key or value the JSON decoder behind
// sigs.k8s.io/yaml would accept wrongly or reject in its own words, in
// file order: keys that match a field only in case (encoding/json matches
// keys case-insensitively), duplicate keys, unknown keys (with the
// nearest known one), and values of the wrong kind. It leaves the values
// themselves to the decoder, so that their meaning stays sigs.k8s.io/yaml's.
// It also returns the line of every path, for the problems found later.
func checkKeys(data []byte) ([]Problem, lines) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return []Problem{syntaxProblem(err)}, nil
	}
	w := keyWalker{lines: lines{}}
	if len(doc.Content) > 0 {
		w.walk(doc.Content[0], reflect.TypeFor[Configuration](), "")
	}
	return w.problems, w.lines
}

// syntaxProblem is a YAML syntax error, its "yaml: line N:" moved into Line.
func syntaxProblem(err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	p := Problem{Msg: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				p.Line, p.Msg = line, after
			}
		}
	}
	return p
}

type keyWalker struct {
	problems []Problem
	lines    lines
}

func (w *keyWalker) add(n *yaml.Node, path, format string, args ...any) {
	w.problems = append(w.problems, Problem{Path: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

var (
	durationType = reflect.TypeFor[metav1.Duration]()
	plugSpecType = reflect.TypeFor[PlugSpec]()
)

func (w *keyWalker) walk(n *yaml.Node, t reflect.Type, path string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Tag == "!!null" {
		return // JSON null: the field keeps its zero value, as leaving it out does
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		w.duration(n, path)
		return
	case t == plugSpecType && n.Kind == yaml.ScalarNode:
		// A level entry may be a device name (PlugSpec.UnmarshalJSON).
		w.scalar(n, reflect.TypeFor[string](), path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			w.add(n, path, "want a mapping of keys, got %s", describeValue(n))
			return
		}
		w.mapping(n, fieldsOf(t), path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.add(n, path, "want a mapping of keys, got %s", describeValue(n))
			return
		}
		seen := map[string]int{}
		for k, v := range pairs(n) {
			kp := join(path, k.Value)
			w.lines[kp] = k.Line
			if line, dup := seen[k.Value]; dup {
				w.add(k, kp, "duplicate key; already set at line %d", line)
			}
			seen[k.Value] = k.Line
			w.walk(v, t.Elem(), kp)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.add(n, path, "want a list, got %s", describeValue(n))
			return
		}
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			w.lines[ip] = item.Line
			w.walk(item, t.Elem(), ip)
		}
	default:
		w.scalar(n, t, path)
	}
}

// mapping checks the keys of a struct's mapping: each must name a field
// exactly, once.
func (w *keyWalker) mapping(n *yaml.Node, fields map[string]reflect.Type, path string) {
	seen := map[string]int{} // field name, as declared, to the line that set it
	for k, v := range pairs(n) {
		kp := join(path, k.Value)
		ft, ok := fields[k.Value]
		if !ok {
			w.add(k, kp, "%s", unknownField(k.Value, fields, seen))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			w.add(k, kp, "duplicate key; already set at line %d", line)
			continue
		}
		seen[k.Value] = k.Line
		w.lines[kp] = k.Line
		w.walk(v, ft, kp)
	}
}

// unknownField says what is wrong with key, which names no field: a field
// in another case (which encoding/json would silently take), or a typo of
// the nearest field.
func unknownField(key string, fields map[string]reflect.Type, seen map[string]int) string {
	for name := range fields {
		if strings.EqualFold(name, key) {
			msg := "keys are case-sensitive; did you mean " + name + "?"
			if line, ok := seen[name]; ok {
				msg += fmt.Sprintf(" (%s is already set at line %d)", name, line)
			}
			return msg
		}
	}
	best, bestDist := "", len(key)/3+1 // a typo changes a few letters, not a word
	for name := range fields {
		if d := editDistance(strings.ToLower(key), strings.ToLower(name)); d < bestDist || d == bestDist && best != "" && name < best {
			best, bestDist = name, d
		}
	}
	if best == "" {
		return "unknown field"
	}
	return "unknown field; did you mean " + best + "?"
}

// pairs yields the key and value nodes of a mapping, merge keys (<<)
// expanded in place.
func pairs(n *yaml.Node) func(yield func(k, v *yaml.Node) bool) {
	return func(yield func(k, v *yaml.Node) bool) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				for v.Kind == yaml.AliasNode {
					v = v.Alias
				}
				if v.Kind == yaml.MappingNode {
					for mk, mv := range pairs(v) {
						if !yield(mk, mv) {
							return
						}
					}
				}
				continue
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// fieldsOf maps the JSON names of t's fields to their types, embedded
// structs' fields included, as encoding/json sees them.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range fieldsOf(f.Type) {
				out[k] = v
			}
			continue
		}
		out[cmp.Or(name, f.Name)] = f.Type
	}
	return out
}

// scalar checks that a scalar suits a string, number or boolean field the
// way the JSON decoder will see it: sigs.k8s.io/yaml reads YAML 1.1, where
// an unquoted yes, no, on or off is a boolean.
func (w *keyWalker) scalar(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.ScalarNode {
		w.add(n, path, "want %s, got %s", kindName(t), describeValue(n))
		return
	}
	tag := yaml11Tag(n)
	ok := false
	switch t.Kind() {
	case reflect.String:
		ok = tag == "!!str"
	case reflect.Bool:
		ok = tag == "!!bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		ok = tag == "!!int"
	case reflect.Float32, reflect.Float64:
		ok = tag == "!!int" || tag == "!!float"
	default:
		return // a type the file format does not use: the decoder judges
	}
	if !ok {
		msg := fmt.Sprintf("want %s, got %s", kindName(t), describeValue(n))
		if t.Kind() == reflect.String && tag == "!!bool" {
			msg += fmt.Sprintf(` (write "%s" in quotes)`, n.Value)
		}
		w.add(n, path, "%s", msg)
	}
}

// duration checks a metav1.Duration: a string time.ParseDuration reads.
func (w *keyWalker) duration(n *yaml.Node, path string) {
	if n.Kind != yaml.ScalarNode || yaml11Tag(n) != "!!str" {
		w.add(n, path, `want a duration like "30s", got %s`, describeValue(n))
		return
	}
	if _, err := time.ParseDuration(n.Value); err != nil {
		w.add(n, path, `want a duration like "30s" or "1m30s", got %q`, n.Value)
	}
}

// yaml11Tag is the tag YAML 1.1 (sigs.k8s.io/yaml's reading) gives a
// scalar that YAML 1.2 (this parser's) reads as a string.
func yaml11Tag(n *yaml.Node) string {
	if n.Tag == "!!str" && n.Style == 0 {
		switch n.Value {
		case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF":
			return "!!bool"
		}
	}
	return n.Tag
}

// describeValue names a YAML value for a message: its kind and, for a scalar,
// itself.
func describeValue(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch yaml11Tag(n) {
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	case "!!str":
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// kindName names what a field of type t wants, in the file's words.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "a mapping of keys"
	case reflect.Slice:
		return "a list"
	}
	return "a whole number"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// editDistance is the number of letters to insert, delete, change or
// swap with their neighbour to turn a into b (the optimal string
// alignment distance): swapped letters are the commonest typo.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// decodeProblem words an error of the JSON decoder that checkKeys did not
// foresee in the file's terms: the field's path instead of a Go type.
func decodeProblem(err error) Problem {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return Problem{Path: te.Field, Msg: fmt.Sprintf("want %s, got a %s", kindName(te.Type), te.Value)}
	}
	return Problem{Msg: cleanDecodeError(err)}
}
