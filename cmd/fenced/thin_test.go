package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// maxWiringLines bounds every function of cmd/fenced but the commands'
// constructors. Wiring — reading flags, loading the configuration,
// building clients, calling pkg/admin, pkg/agent or pkg/credentials,
// printing their result, choosing the exit code — has stayed under 50
// lines a function here; what grew past it was logic (runBMC, 69 lines,
// and runTopologyCheck, 67, before they moved to pkg/admin). A command's
// constructor (new…Command) is long because of its help text, and its
// RunE is a function literal, measured like any other.
const maxWiringLines = 50

// forbiddenImports are what cmd/fenced must reach only through pkg/admin
// and pkg/agent: the fencing controller, its decision core and the power
// device drivers. A command that needs them is logic, and belongs there.
var forbiddenImports = []string{"fenced.io/fenced/pkg/fencing"}

// TestMainOnlyWires keeps cmd/fenced a wiring package (its doc says so):
// no import of the fencing packages, no function over maxWiringLines
// except the commands' constructors.
func TestMainOnlyWires(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbiddenImports {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s: drive devices and decide in pkg/admin or pkg/agent, and call that", name, path)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var what string
			switch fn := n.(type) {
			case *ast.FuncDecl:
				if strings.HasPrefix(fn.Name.Name, "new") && strings.HasSuffix(fn.Name.Name, "Command") {
					return true // help text; its closures are measured on their own
				}
				what = fn.Name.Name
			case *ast.FuncLit:
				what = "the function literal at line " + strconv.Itoa(fset.Position(fn.Pos()).Line)
			default:
				return true
			}
			if lines := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1; lines > maxWiringLines {
				t.Errorf("%s: %s is %d lines (at most %d): move its logic into the package it wires (pkg/admin, pkg/agent, pkg/credentials) and call it", name, what, lines, maxWiringLines)
			}
			return true
		})
	}
}
