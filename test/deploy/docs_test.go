package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"fenced.io/fenced/pkg/config"
)

// The documents whose content tests hold to the code.
const (
	// packageMapDoc holds the one package map, under packageMapHeading.
	packageMapDoc     = "docs/design.md"
	packageMapHeading = "### The package map"
	// configReferenceDoc is the configuration reference.
	configReferenceDoc = "docs/configuration.md"
)

// TestPackageMapCoversTheModule: every package of the module (`go list
// ./...`) is on the package map, and every path on the map is a package or
// a directory of the repository. A package added, moved or renamed without
// its row fails here, by name.
func TestPackageMapCoversTheModule(t *testing.T) {
	root := repoRoot(t)
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	modCmd := exec.Command("go", "list", "-m")
	modCmd.Dir = root
	mod, err := modCmd.Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	module := strings.TrimSpace(string(mod))
	packages := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if rel == "" {
			rel = "."
		}
		packages[rel] = true
	}

	onMap := packageMapPaths(t, string(readFile(t, packageMapDoc)))
	for _, p := range sortedKeys(packages) {
		if !onMap[p] {
			t.Errorf("package %s is not on the package map: add a row for it to the table under %q in %s", p, packageMapHeading, packageMapDoc)
		}
	}
	for _, p := range sortedKeys(onMap) {
		if packages[p] {
			continue
		}
		if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
			t.Errorf("the package map in %s names %s, which is neither a package of the module nor a directory any more: remove or rename its row", packageMapDoc, p)
		}
	}
}

// codeSpan matches an inline code span: `text`.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// packageMapPaths returns the paths in the first column of the table under
// packageMapHeading.
func packageMapPaths(t *testing.T, doc string) map[string]bool {
	t.Helper()
	_, after, ok := strings.Cut(doc, "\n"+packageMapHeading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", packageMapDoc, packageMapHeading)
	}
	paths := map[string]bool{}
	inTable := false
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break // the table ended
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.Trim(cells[1], " -") == "" || strings.TrimSpace(cells[1]) == "path" {
			continue // separator or header
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			paths[strings.TrimSuffix(m[1], "/")] = true
		}
	}
	if len(paths) == 0 {
		t.Fatalf("no table of paths under %q in %s", packageMapHeading, packageMapDoc)
	}
	return paths
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestConfigurationReferenceNamesEveryField: every field of the
// configuration file (config.Configuration, by its YAML name) appears in a
// code span of the configuration reference, so a new field cannot ship
// undocumented.
func TestConfigurationReferenceNamesEveryField(t *testing.T) {
	doc := string(readFile(t, configReferenceDoc))
	documented := map[string]bool{}
	word := regexp.MustCompile(`[A-Za-z]+`)
	for _, m := range codeSpan.FindAllStringSubmatch(doc, -1) {
		for _, w := range word.FindAllString(m[1], -1) {
			documented[w] = true
		}
	}
	for _, field := range configFields(reflect.TypeOf(config.Configuration{}), "") {
		name := field[strings.LastIndexAny(field, ".]")+1:]
		if !documented[name] {
			t.Errorf("configuration field %s is not in %s: add it to the reference table with its default", field, configReferenceDoc)
		}
	}
}

// configFields lists the YAML paths of t's fields, inline fields without a
// prefix, slices as name[].
func configFields(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var fields []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			fields = append(fields, configFields(ft, prefix)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := prefix + name
		for ft.Kind() == reflect.Slice {
			ft = ft.Elem()
			path += "[]"
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		// Structs of the file format recurse; others (durations, maps,
		// strings) are leaves.
		if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
			fields = append(fields, configFields(ft, path+".")...)
			continue
		}
		fields = append(fields, path)
	}
	return fields
}
