package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// maxFuncLines bounds a function of the core, from its func keyword to its
// closing brace: one a reader takes in at once.
const maxFuncLines = 60

// parseCore parses the package's non-test files.
func parseCore(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, n, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	if len(files) < 5 {
		t.Fatalf("parsed only %d files of the core", len(files))
	}
	return fset, files
}

// TestTransitionsStayInBecome holds the state machine to its explicit
// transitions (transitions.go): outside the become* functions, nothing
// assigns a target's Phase or Since, builds a whole Target (the `*t =
// Target{…}` resets), or calls the become primitive itself.
func TestTransitionsStayInBecome(t *testing.T) {
	fset, files := parseCore(t)
	funcs := 0
	for _, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			funcs++
			name := fn.Name.Name
			if strings.HasPrefix(name, "become") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, lhs := range n.Lhs {
						if sel, ok := lhs.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Phase" || sel.Sel.Name == "Since") {
							t.Errorf("%s: %s assigns %s outside the become* functions", fset.Position(n.Pos()), name, sel.Sel.Name)
						}
					}
				case *ast.CompositeLit:
					if id, ok := n.Type.(*ast.Ident); ok && id.Name == "Target" {
						t.Errorf("%s: %s builds a whole Target outside the become* functions", fset.Position(n.Pos()), name)
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "become" {
						t.Errorf("%s: %s calls become; only the become<Phase> functions may", fset.Position(n.Pos()), name)
					}
				}
				return true
			})
		}
	}
	if funcs < 50 {
		t.Fatalf("found only %d functions in the core", funcs)
	}
}

// TestCoreFunctionsAreShort: no function of the core is longer than
// maxFuncLines.
func TestCoreFunctionsAreShort(t *testing.T) {
	fset, files := parseCore(t)
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			var name string
			switch n := n.(type) {
			case *ast.FuncDecl:
				name = n.Name.Name
			case *ast.FuncLit:
				name = "a function literal"
			default:
				return true
			}
			from, to := fset.Position(n.Pos()), fset.Position(n.End())
			if lines := to.Line - from.Line + 1; lines > maxFuncLines {
				t.Errorf("%s: %s is %d lines long, more than %d", from, name, lines, maxFuncLines)
			}
			return true
		})
	}
}
