package debian

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Package is one stanza of a Packages index: what resolving needs.
type Package struct {
	Name, Version, Arch string
	// Depends and Pre-Depends, each an alternatives group.
	Depends  [][]string
	Provides []string
	Filename string
	SHA256   string
	Size     int64
	// Base is the archive the index came from (Suite.Base): Filename is
	// below a mirror's root + Base.
	Base string
}

// Index is the packages of one architecture, by name, from one or more
// Packages files: a later file's stanza replaces an earlier one's (the
// suites' order: the release, then its updates and security updates).
type Index struct {
	Packages map[string]*Package
	// providers maps a virtual package to the real ones providing it.
	providers map[string][]string
}

// NewIndex is an empty index.
func NewIndex() *Index {
	return &Index{Packages: map[string]*Package{}, providers: map[string][]string{}}
}

// Add reads a Packages file (uncompressed) of the archive base into the index.
func (ix *Index) Add(r io.Reader, base string) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fields := map[string]string{}
	last := ""
	flush := func() error {
		defer clear(fields)
		if fields["Package"] == "" {
			return nil
		}
		size, err := strconv.ParseInt(fields["Size"], 10, 64)
		if err != nil {
			return fmt.Errorf("package %s: size %q", fields["Package"], fields["Size"])
		}
		p := &Package{Name: fields["Package"], Version: fields["Version"], Arch: fields["Architecture"],
			Filename: fields["Filename"], SHA256: fields["SHA256"], Size: size, Base: base}
		for _, key := range []string{"Pre-Depends", "Depends"} {
			p.Depends = append(p.Depends, parseDepends(fields[key])...)
		}
		for _, group := range parseDepends(fields["Provides"]) {
			p.Provides = append(p.Provides, group...)
		}
		ix.Packages[p.Name] = p
		for _, v := range p.Provides {
			if !slices.Contains(ix.providers[v], p.Name) {
				ix.providers[v] = append(ix.providers[v], p.Name)
			}
		}
		return nil
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if err := flush(); err != nil {
				return err
			}
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += "\n" + line
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				return fmt.Errorf("malformed line %q", line)
			}
			last = k
			fields[k] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return flush()
}

// parseDepends parses a Depends-style field into alternatives groups of
// package names, without versions and architecture qualifiers: the index
// holds one version of each package, the one resolving takes.
func parseDepends(field string) [][]string {
	var out [][]string
	for _, group := range strings.Split(field, ",") {
		var alts []string
		for _, alt := range strings.Split(group, "|") {
			alt = strings.TrimSpace(alt)
			if i := strings.IndexAny(alt, " (["); i >= 0 {
				alt = alt[:i]
			}
			alt, _, _ = strings.Cut(alt, ":")
			if alt != "" {
				alts = append(alts, alt)
			}
		}
		if len(alts) > 0 {
			out = append(out, alts)
		}
	}
	return out
}

// Resolve is the closure of roots over Depends and Pre-Depends, leaving
// out the excluded packages (and the needs of them): for each group of
// alternatives, one already chosen satisfies it; else an excluded one
// leaves it out; else the first that exists, as a package or provided by
// one, is taken. It returns the packages sorted by name.
func (ix *Index) Resolve(roots, excludes []string) ([]*Package, error) {
	chosen := map[string]*Package{}
	excluded := map[string]bool{}
	for _, e := range excludes {
		excluded[e] = true
	}
	// real is the package that satisfies name, if any.
	real := func(name string) *Package {
		if p := ix.Packages[name]; p != nil {
			return p
		}
		for _, prov := range ix.providers[name] {
			if p := chosen[prov]; p != nil {
				return p
			}
		}
		if provs := ix.providers[name]; len(provs) > 0 {
			return ix.Packages[slices.Min(provs)]
		}
		return nil
	}
	var queue []string
	visit := func(name, by string) error {
		p := real(name)
		if p == nil {
			return fmt.Errorf("%s (needed by %s) is in no index", name, by)
		}
		if excluded[p.Name] {
			return nil
		}
		if chosen[p.Name] == nil {
			chosen[p.Name] = p
			queue = append(queue, p.Name)
		}
		return nil
	}
	for _, r := range roots {
		if err := visit(r, "the lock's roots"); err != nil {
			return nil, err
		}
	}
	for len(queue) > 0 {
		p := chosen[queue[0]]
		queue = queue[1:]
		for _, group := range p.Depends {
			done := false
			for _, alt := range group {
				if q := real(alt); excluded[alt] || (q != nil && (chosen[q.Name] != nil || excluded[q.Name])) {
					done = true
					break
				}
			}
			if done {
				continue
			}
			var first error
			for i, alt := range group {
				err := visit(alt, p.Name)
				if err == nil {
					first = nil
					break
				}
				if i == 0 {
					first = err
				}
			}
			if first != nil {
				return nil, first
			}
		}
	}
	out := make([]*Package, 0, len(chosen))
	for _, p := range chosen {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Package) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
