package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// notSettings are the fields of Configuration that configure nothing: they
// say what the file is.
var notSettings = []string{"apiVersion", "kind"}

// TestEveryFieldClassified walks Configuration, the file's type, and fails
// for a field that is neither reloadable nor restart-only: a field added to
// the file must be given a side, or a running fencer would silently take a
// setting its built-once parts never read again (or ignore one it could
// take). It also fails for a listed path that names no field (a renamed
// one) and for a field on both sides.
func TestEveryFieldClassified(t *testing.T) {
	fields := fieldPaths(reflect.TypeFor[Configuration](), "")
	if len(fields) < 20 {
		t.Fatalf("found only %d fields in Configuration: %v", len(fields), fields)
	}
	var restart []string
	for _, s := range restartOnly {
		// Derived entries ("bmc/fenceDevices (fencer or observer)") are
		// no one field: a consequence of fields classified elsewhere.
		if !strings.ContainsAny(s.path, " /") {
			restart = append(restart, s.path)
		}
	}
	covered := func(list []string, field string) bool {
		return slices.ContainsFunc(list, func(p string) bool { return field == p || strings.HasPrefix(field, p+".") })
	}
	for _, f := range fields {
		r, o, n := covered(reloadable, f), covered(restart, f), covered(notSettings, f)
		switch {
		case !r && !o && !n:
			t.Errorf("%s is in neither reloadable nor restartOnly (pkg/config/reload.go): say whether a running fencer applies it, "+
				"and docs/configuration.md's table of what reloads", f)
		case r && o:
			t.Errorf("%s is both reloadable and restart-only", f)
		}
	}
	for _, list := range []struct {
		name  string
		paths []string
	}{{"reloadable", reloadable}, {"restartOnly", restart}, {"notSettings", notSettings}} {
		for _, p := range list.paths {
			if !slices.ContainsFunc(fields, func(f string) bool { return f == p || strings.HasPrefix(f, p+".") }) {
				t.Errorf("%s lists %s, which is no field of Configuration", list.name, p)
			}
		}
	}
}

// fieldPaths lists the leaf fields of t by their paths in the file (json
// names; items of a list under the list's path, inline structs under their
// parent's). Types of other packages (durations, modes) are leaves.
func fieldPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Configuration]().PkgPath() {
		return []string{prefix}
	}
	var out []string
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous || name == "" && strings.Contains(opts, "inline") {
			out = append(out, fieldPaths(f.Type, prefix)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		out = append(out, fieldPaths(f.Type, path)...)
	}
	return out
}

// TestFieldPaths: the walk sees through pointers, lists and inline structs.
func TestFieldPaths(t *testing.T) {
	fields := fieldPaths(reflect.TypeFor[Configuration](), "")
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"policy.dryRun", true},               // a pointer
		{"bmc.nodes.name", true},              // a list's items
		{"bmc.nodes.address", true},           // inline BMCSpec
		{"bmc.defaults.redfish.caFile", true}, // a pointer to a struct
		{"fencer.leaseDuration", true},        // metav1.Duration: a leaf
		{"fencer.leaseDuration.Duration", false},
		{"bmc.nodes.BMCSpec", false},
	} {
		if got := slices.Contains(fields, tc.path); got != tc.want {
			t.Errorf("%s among Configuration's fields: %v, want %v", tc.path, got, tc.want)
		}
	}
}
