package vocab

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// vocabPath is this package's import path, as the scanned files import it.
const vocabPath = "fenced.io/fenced/pkg/vocab"

// eventCatalogue returns the EventReason constants of events.go: name to
// value, in declaration order.
func eventCatalogue(t *testing.T) (names []string, values map[string]string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	values = map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "EventReason" {
				t.Errorf("events.go: %s is not an EventReason: the catalogue holds Event reasons only", vs.Names[0].Name)
				continue
			}
			for i, n := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("events.go: %s is not a string literal", n.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, n.Name)
				values[n.Name] = v
			}
		}
	}
	return names, values
}

// TestEventCatalogueNames: each reason is named "Event" + its value, so
// that what `kubectl get events` shows finds its declaration, and no two
// share a value.
func TestEventCatalogueNames(t *testing.T) {
	names, values := eventCatalogue(t)
	if len(names) < 40 {
		t.Fatalf("only %d reasons in events.go", len(names))
	}
	seen := map[string]string{}
	for _, n := range names {
		v := values[n]
		if n != "Event"+v {
			t.Errorf("%s = %q: name it Event%s", n, v, v)
		}
		if other, ok := seen[v]; ok {
			t.Errorf("%s and %s both say %q", other, n, v)
		}
		seen[v] = n
	}
}

// recorderMethods are client-go's record.EventRecorder methods, with the
// index of their reason argument.
var recorderMethods = map[string]int{"Event": 2, "Eventf": 2, "AnnotatedEventf": 3}

// TestEventCatalogue keeps every Event reason of the product (pkg/...,
// cmd/...) in events.go:
//
//   - the reason a recorder call passes is a catalogue constant, or a
//     variable or field (vocab.EventReason, filled from the catalogue) —
//     never a string literal, nor a constant declared anywhere else;
//   - nothing outside this package declares an EventReason or converts a
//     literal into one;
//   - no string literal outside this package spells a catalogue value (a
//     second declaration of a reason, or a comparison with a bare one);
//   - every catalogue entry is used.
func TestEventCatalogue(t *testing.T) {
	names, values := eventCatalogue(t)
	isValue := map[string]string{}
	for _, n := range names {
		isValue[values[n]] = n
	}
	used := map[string]bool{}
	calls := 0
	checked := eachProgramFile(t, []string{"pkg", "cmd"}, func(pos func(token.Pos) token.Position, f *ast.File, consts map[string]bool) {
		vocabName := importName(f, vocabPath)
		imported := map[string]bool{}
		for _, im := range f.Imports {
			if p, err := strconv.Unquote(im.Path.Value); err == nil {
				imported[importName(f, p)] = true
			}
		}
		// fromCatalogue reports whether e is vocab.<name> and records the use.
		fromCatalogue := func(e ast.Expr) (name string, ok bool) {
			sel, isSel := e.(*ast.SelectorExpr)
			if !isSel {
				return "", false
			}
			if x, isIdent := sel.X.(*ast.Ident); !isIdent || vocabName == "" || x.Name != vocabName {
				return "", false
			}
			return sel.Sel.Name, true
		}
		checkReason := func(call *ast.CallExpr, arg ast.Expr) {
			// string(r): the recorder takes a string.
			if c, ok := arg.(*ast.CallExpr); ok && len(c.Args) == 1 {
				if fn, ok := c.Fun.(*ast.Ident); ok && fn.Name == "string" {
					arg = c.Args[0]
				}
			}
			at := pos(arg.Pos())
			if name, ok := fromCatalogue(arg); ok {
				if _, in := values[name]; !in {
					t.Errorf("%s: Event reason vocab.%s is not in the catalogue (events.go)", at, name)
				}
				return
			}
			switch a := arg.(type) {
			case *ast.BasicLit:
				t.Errorf("%s: Event reason %s is a string literal: declare it in pkg/vocab/events.go", at, a.Value)
			case *ast.Ident:
				if consts[a.Name] {
					t.Errorf("%s: Event reason %s is a constant of its package: declare it in pkg/vocab/events.go", at, a.Name)
				}
			case *ast.SelectorExpr:
				if x, ok := a.X.(*ast.Ident); ok && imported[x.Name] {
					t.Errorf("%s: Event reason %s.%s is declared in another package: declare it in pkg/vocab/events.go", at, x.Name, a.Sel.Name)
				}
			default:
				t.Errorf("%s: Event reason built by an expression: use a constant of pkg/vocab/events.go", at)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if name, ok := fromCatalogue(n); ok {
					if _, in := values[name]; in {
						used[name] = true
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if i, ok := recorderMethods[sel.Sel.Name]; ok && len(n.Args) > i+1 {
					calls++
					checkReason(n, n.Args[i])
				}
				if name, ok := fromCatalogue(sel); ok && name == "EventReason" && len(n.Args) == 1 {
					if _, lit := n.Args[0].(*ast.BasicLit); lit {
						t.Errorf("%s: vocab.EventReason(%s) makes up a reason: declare it in pkg/vocab/events.go", pos(n.Pos()), n.Args[0].(*ast.BasicLit).Value)
					}
				}
			case *ast.ValueSpec:
				if name, ok := fromCatalogue(n.Type); ok && name == "EventReason" {
					t.Errorf("%s: %s declares an EventReason outside the catalogue", pos(n.Pos()), n.Names[0].Name)
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(n.Value); err == nil && isValue[s] != "" {
					t.Errorf("%s: %s spells an Event reason: use vocab.%s", pos(n.Pos()), n.Value, isValue[s])
				}
			}
			return true
		})
	})
	if checked < 50 || calls < 10 {
		t.Fatalf("checked only %d files, %d recorder calls", checked, calls)
	}
	for _, n := range names {
		if !used[n] {
			t.Errorf("vocab.%s is used by no program file: remove it, or record it", n)
		}
	}
}

// importName is the name file f knows the package at path by, or "" when
// f does not import it.
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		if p, err := strconv.Unquote(im.Path.Value); err != nil || p != path {
			continue
		}
		if im.Name != nil {
			return im.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

// constNames returns the names of every constant declared in files, at any
// scope.
func constNames(files []*ast.File) map[string]bool {
	names := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, id := range s.(*ast.ValueSpec).Names {
						names[id.Name] = true
					}
				}
			}
			return true
		})
	}
	return names
}

func TestImportName(t *testing.T) {
	src := `package p
import (
	"fenced.io/fenced/pkg/vocab"
	v1 "k8s.io/api/core/v1"
)`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{vocabPath: "vocab", "k8s.io/api/core/v1": "v1", "fmt": ""} {
		if got := importName(f, path); got != want {
			t.Errorf("importName(%s) = %q, want %q", path, got, want)
		}
	}
}
