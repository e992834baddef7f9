package vocab

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// words is every string the vocabulary defines.
var words = map[string]bool{}

func init() {
	for _, w := range []string{
		string(MemberAlive), string(MemberSuspect), string(MemberDead), string(MemberLeft),
		string(AnnounceRunning), string(AnnounceShuttingDown), string(AnnounceShutdownComplete),
		string(EvidenceBMCPowerOff), string(EvidenceCleanShutdown), string(EvidenceManual),
		string(GracefulKubeletDelayLock), string(GracefulNone), string(GracefulUnknown),
		string(ModeConfirmOnly), string(ModePowerOff),
	} {
		words[w] = true
	}
}

// TestNoBareVocabulary: outside this package, no program file compares
// with a member state, an announcement, an evidence method or a mode spelled as a
// string literal (== , != or a switch case): a typo there would compile
// and silently mean "never fenced". (Tests may, to say what goes over the
// wire.)
func TestNoBareVocabulary(t *testing.T) {
	checked := eachProgramFile(t, nil, func(pos func(token.Pos) token.Position, f *ast.File, _ map[string]bool) {
		bare := func(e ast.Expr) {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return
			}
			if s, err := strconv.Unquote(lit.Value); err == nil && words[s] {
				t.Errorf("%s: compares with %s: use pkg/vocab's constant", pos(lit.Pos()), lit.Value)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					bare(n.X)
					bare(n.Y)
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					bare(e)
				}
			}
			return true
		})
	})
	if checked < 50 {
		t.Fatalf("checked only %d files", checked)
	}
}

// eachProgramFile parses every program (non-test) Go file of the module
// outside this package — under the given top-level directories, or all of
// them — and calls fn with it, a position finder and the names of the
// constants its package declares. It returns how many files it checked, and
// skips when not run inside the repository.
func eachProgramFile(t *testing.T, under []string, fn func(pos func(token.Pos) token.Position, f *ast.File, consts map[string]bool)) int {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Skipf("not in the repository: %v", err)
	}
	if len(under) == 0 {
		under = []string{"."}
	}
	fset := token.NewFileSet()
	byDir := map[string][]*ast.File{}
	var dirs []string
	for _, top := range under {
		err = filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name := d.Name(); path != root && strings.HasPrefix(name, ".") || name == "testdata" || path == filepath.Join(root, "pkg", "vocab") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			dir := filepath.Dir(path)
			if byDir[dir] == nil {
				dirs = append(dirs, dir)
			}
			byDir[dir] = append(byDir[dir], f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checked := 0
	for _, dir := range dirs {
		consts := constNames(byDir[dir])
		for _, f := range byDir[dir] {
			checked++
			fn(fset.Position, f, consts)
		}
	}
	return checked
}

func TestWords(t *testing.T) {
	for _, a := range []Announcement{AnnounceRunning, AnnounceShuttingDown, AnnounceShutdownComplete} {
		if !a.Valid() {
			t.Errorf("%s not valid", a)
		}
	}
	if Announcement("rebooting").Valid() || EvidenceMethod("timeout").Valid() || EvidenceMethod("").Valid() {
		t.Error("unknown words accepted")
	}
	if !AnnounceShuttingDown.Shutdown() || !AnnounceShutdownComplete.Shutdown() || AnnounceRunning.Shutdown() {
		t.Error("Shutdown")
	}
	if !MemberDead.Gone() || !MemberLeft.Gone() || MemberAlive.Gone() || MemberSuspect.Gone() {
		t.Error("Gone")
	}
}
