package debian

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLockRoundTrip(t *testing.T) {
	const text = `# head
suite debian bookworm
arch amd64
root fence-agents
exclude python3-boto3 # why

deb amd64 zlib1g 1:1.2.13.dfsg-1 debian/pool/main/z/zlib/zlib1g_1.2.13.dfsg-1_amd64.deb ` + sixtyFour + ` 123
deb amd64 fence-agents 4.12.1-1 debian/pool/main/f/fence-agents/fence-agents_4.12.1-1_amd64.deb ` + sixtyFour + ` 7
`
	l, err := ParseLock(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(l.Suites, l.Arches, l.Roots, l.Excludes) != "[{debian bookworm}] [amd64] [fence-agents] [python3-boto3]" || len(l.Debs) != 2 {
		t.Fatalf("parsed %+v", l)
	}
	again, err := ParseLock(bytes.NewReader(l.Format()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Format(), l.Format()) || again.For("amd64")[0].Package != "fence-agents" {
		t.Fatalf("formatted lock does not read back the same (sorted):\n%s", l.Format())
	}
	for _, bad := range []string{"suite debian", "deb amd64 x 1 p short 1", "frobnicate x"} {
		if _, err := ParseLock(strings.NewReader(bad)); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

const sixtyFour = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestResolve: the closure over Depends and Pre-Depends, alternatives,
// virtual packages, architecture qualifiers, excludes and a later index
// replacing an earlier one's stanza.
func TestResolve(t *testing.T) {
	release := `Package: app
Version: 1
Architecture: amd64
Pre-Depends: libc6 (>= 2.34)
Depends: python3:any (>= 3.11), mime-support | media-types, python3-boto3, dpkg (>= 1.15) | install-info, www-browser
Filename: pool/a/app_1.deb
Size: 10
SHA256: aa

Package: libc6
Version: 2.36-9
Architecture: amd64
Depends: libgcc-s1
Filename: pool/l/libc6_2.36-9.deb
Size: 1
SHA256: bb

Package: libgcc-s1
Version: 12
Architecture: amd64
Depends: libc6
Filename: pool/l/libgcc.deb
Size: 1
SHA256: cc

Package: python3
Version: 3.11.2-1
Architecture: amd64
Filename: pool/p/python3.deb
Size: 1
SHA256: dd

Package: media-types
Version: 10
Architecture: all
Filename: pool/m/media-types.deb
Size: 1
SHA256: ee

Package: python3-boto3
Version: 1
Architecture: all
Depends: python3-botocore
Filename: pool/b/boto3.deb
Size: 1
SHA256: ff

Package: lynx
Version: 2
Architecture: amd64
Provides: www-browser
Filename: pool/l/lynx.deb
Size: 1
SHA256: 11
`
	security := `Package: libc6
Version: 2.36-9+deb12u1
Architecture: amd64
Depends: libgcc-s1
Filename: pool/updates/l/libc6_2.36-9+deb12u1.deb
Size: 1
SHA256: 22
`
	ix := NewIndex()
	if err := ix.Add(strings.NewReader(release), "debian"); err != nil {
		t.Fatal(err)
	}
	if err := ix.Add(strings.NewReader(security), "debian-security"); err != nil {
		t.Fatal(err)
	}
	pkgs, err := ix.Resolve([]string{"app"}, []string{"python3-boto3", "dpkg", "install-info"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pkgs {
		got = append(got, p.Name+"="+p.Version+"@"+p.Base)
	}
	want := []string{"app=1@debian", "libc6=2.36-9+deb12u1@debian-security", "libgcc-s1=12@debian", "lynx=2@debian", "media-types=10@debian", "python3=3.11.2-1@debian"}
	if !slices.Equal(got, want) {
		t.Fatalf("Resolve = %v\nwant %v", got, want)
	}
	if _, err := ix.Resolve([]string{"app"}, []string{"dpkg", "install-info"}); err == nil || !strings.Contains(err.Error(), "python3-botocore") {
		t.Fatalf("a dependency in no index: %v", err)
	}
}

// deb builds a .deb whose data.tar.gz holds entries.
func deb(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var data bytes.Buffer
	gz := gzip.NewWriter(&data)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		body := []byte(h.Linkname)
		if h.Typeflag == tar.TypeReg {
			h.Size, body = int64(len(h.Name)), []byte(h.Name)
			if strings.HasPrefix(h.Name, "./same/") {
				body = []byte("same")
				h.Size = 4
			}
		}
		if h.Typeflag == tar.TypeReg && h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write(body)
		}
	}
	_ = tw.Close()
	_ = gz.Close()
	var ar bytes.Buffer
	ar.WriteString("!<arch>\n")
	for _, m := range []struct {
		name string
		body []byte
	}{{"debian-binary", []byte("2.0\n")}, {"data.tar.gz", data.Bytes()}} {
		fmt.Fprintf(&ar, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", m.name+"/", 0, 0, 0, "100644", len(m.body))
		ar.Write(m.body)
		if len(m.body)%2 == 1 {
			ar.WriteByte('\n')
		}
	}
	return ar.Bytes()
}

func TestUnpack(t *testing.T) {
	dir := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeDir, Mode: 0o755} }
	reg := func(n string, mode int64) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: mode} }
	a := deb(t, dir("./"), dir("./bin/"), reg("./bin/tool", 0o4755), dir("./lib64/"),
		tar.Header{Name: "./lib64/ld.so", Typeflag: tar.TypeSymlink, Linkname: "/lib/x86_64/ld.so"},
		dir("./usr/share/doc/a/"), reg("./usr/share/doc/a/copyright", 0), reg("./usr/share/doc/a/changelog.gz", 0),
		reg("./usr/share/man/man1/tool.1.gz", 0), reg("./usr/lib/python3", 0o644),
		tar.Header{Name: "./usr/lib/python3-again", Typeflag: tar.TypeLink, Linkname: "./usr/lib/python3"},
		reg("./same/file", 0))
	b := deb(t, dir("./"), dir("./bin/"), reg("./same/file", 0), reg("./usr/lib-extra/x", 0))
	tree, err := Unpack(map[string][]byte{"a": a, "b": b})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]File{}
	for _, f := range tree {
		names = append(names, f.Name)
		byName[f.Name] = f
	}
	want := []string{"bin", "lib", "lib64", "same", "same/file", "sbin", "usr", "usr/bin", "usr/bin/tool",
		"usr/lib", "usr/lib/python3", "usr/lib/python3-again", "usr/lib-extra", "usr/lib-extra/x",
		"usr/lib64", "usr/lib64/ld.so", "usr/sbin", "usr/share", "usr/share/doc", "usr/share/doc/a", "usr/share/doc/a/copyright"}
	if !slices.Equal(names, want) {
		t.Fatalf("tree:\n%v\nwant\n%v", names, want)
	}
	if f := byName["usr/bin/tool"]; f.Mode != 0o755 {
		t.Errorf("setuid kept: %o", f.Mode)
	}
	if f := byName["lib"]; f.Type != tar.TypeSymlink || f.Linkname != "usr/lib" {
		t.Errorf("lib: %+v, want a link to usr/lib", f)
	}
	if f := byName["usr/lib/python3-again"]; f.Type != tar.TypeReg || string(f.Body) != "./usr/lib/python3" {
		t.Errorf("hard link not made a copy: %+v", f)
	}

	c := deb(t, reg("./same/file-differs", 0))
	d := deb(t, tar.Header{Name: "./same/file-differs", Typeflag: tar.TypeSymlink, Linkname: "x"})
	if _, err := Unpack(map[string][]byte{"c": c, "d": d}); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("two packages with different same/file-differs: %v", err)
	}
}

// TestFetchVerifies: a cached file is used only if it matches the lock.
func TestFetchVerifies(t *testing.T) {
	cache := t.TempDir()
	body := []byte("a package")
	sum := sha256.Sum256(body)
	d := Deb{Arch: "amd64", Package: "p", Version: "1", Path: "unused", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(body))}
	if err := os.WriteFile(filepath.Join(cache, d.SHA256+".deb"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Fetch(d, cache); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Fetch from the cache = %q, %v", got, err)
	}
	if err := verify(d, []byte("another package")); err == nil {
		t.Fatal("a file that is not the lock's was accepted")
	}
}

// TestCommittedLock: the fence-agents lock locks its roots for each of its
// architectures, the same packages for each, none it excludes.
func TestCommittedLock(t *testing.T) {
	l, err := ReadLock("../fence-agents.lock")
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	for i, arch := range l.Arches {
		var names []string
		for _, d := range l.For(arch) {
			names = append(names, d.Package)
			if slices.Contains(l.Excludes, d.Package) || !strings.HasSuffix(d.Path, ".deb") {
				t.Errorf("%s: %s %s is excluded or no .deb", arch, d.Package, d.Path)
			}
		}
		for _, r := range l.Roots {
			if !slices.Contains(names, r) {
				t.Errorf("%s: root %s is not locked", arch, r)
			}
		}
		if i == 0 {
			first = names
		} else if !slices.Equal(names, first) {
			t.Errorf("%s locks %v, %s %v", arch, names, l.Arches[0], first)
		}
	}
	if len(l.Debs) != len(first)*len(l.Arches) {
		t.Errorf("%d debs for %d architectures of %d packages", len(l.Debs), len(l.Arches), len(first))
	}
}
