// Command release writes the parts of a release folder that must come out
// byte for byte the same from the same commit; make release runs it
// (docs/release.md):
//
//	release archive -binary FILE -platform linux/amd64 -version V -mtime UNIX -out DIR [FILE...]
//	    fenced-V-linux-amd64.tar.gz: the binary as "fenced" and the extra files
//	    (LICENSE, README.md) at the top, sorted, owned by 0:0, stamped mtime;
//	    gzip without a name or a time
//	release chart-values -registry R values.yaml
//	    every image "repository:" in the chart's values names registry R
//	release retar -mtime UNIX FILE.tgz
//	    rewrites a tar.gz (helm package stamps every entry with the time of
//	    the run) with the entries in the same order, stamped mtime, owned by 0:0
//	release image-sbom -image ARCHIVE -repository REPO -version V -mtime UNIX -out FILE [-debian-lock FILE] BINARY-SBOM...
//	    a CycloneDX SBOM of an OCI image archive: the image, the fenced
//	    binary's modules (from the binaries' SBOMs), the Debian packages of its lock
//	release krew -dir DIR -version V -url BASE [-homepage URL]
//	    krew/fenced.yaml, the krew plugin manifest (kubectl fenced) naming
//	    the archives in DIR at BASE/NAME with their sha256
//	release sums -dir DIR
//	    SHA256SUMS over every other file under DIR, in sha256sum's format
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "archive":
		err = archiveCommand(args)
	case "chart-values":
		err = chartValuesCommand(args)
	case "retar":
		err = retarCommand(args)
	case "image-sbom":
		err = imageSBOMCommand(args)
	case "krew":
		err = krewCommand(args)
	case "sums":
		err = sumsCommand(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release archive|chart-values|retar|image-sbom|krew|sums [flags] (see hack/release/main.go)")
	os.Exit(2)
}

// parse parses a subcommand's flags (an error exits: ExitOnError).
func parse(fs *flag.FlagSet, args []string) {
	_ = fs.Parse(args)
}

func archiveCommand(args []string) error {
	fs := flag.NewFlagSet("archive", flag.ExitOnError)
	binary := fs.String("binary", "", "the fenced binary")
	platform := fs.String("platform", "", "its platform, os/arch")
	version := fs.String("version", "", "the release version")
	mtime := fs.Int64("mtime", 0, "the time of every entry, seconds since the epoch (the commit's time)")
	out := fs.String("out", ".", "the release folder")
	parse(fs, args)
	p, err := parsePlatform(*platform)
	if err != nil {
		return err
	}
	if *binary == "" || *version == "" {
		return fmt.Errorf("archive: -binary and -version are required")
	}
	name, err := writeBinaryArchive(*out, *binary, p, *version, fs.Args(), time.Unix(*mtime, 0))
	if err == nil {
		fmt.Println("wrote", name)
	}
	return err
}

func chartValuesCommand(args []string) error {
	fs := flag.NewFlagSet("chart-values", flag.ExitOnError)
	registry := fs.String("registry", "", "the registry the images are pushed to, e.g. ghcr.io/fenced-io")
	parse(fs, args)
	if *registry == "" || fs.NArg() != 1 {
		return fmt.Errorf("chart-values: want -registry R values.yaml")
	}
	return rewriteFile(fs.Arg(0), func(b []byte) ([]byte, error) { return setImageRegistry(b, *registry) })
}

func retarCommand(args []string) error {
	fs := flag.NewFlagSet("retar", flag.ExitOnError)
	mtime := fs.Int64("mtime", 0, "the time of every entry, seconds since the epoch")
	parse(fs, args)
	if fs.NArg() != 1 {
		return fmt.Errorf("retar: want one .tgz")
	}
	return rewriteFile(fs.Arg(0), func(b []byte) ([]byte, error) { return normalizeTarGz(b, time.Unix(*mtime, 0)) })
}

func imageSBOMCommand(args []string) error {
	fs := flag.NewFlagSet("image-sbom", flag.ExitOnError)
	image := fs.String("image", "", "the image's OCI archive")
	repository := fs.String("repository", "", "where the image is pushed, e.g. ghcr.io/fenced-io/fenced")
	version := fs.String("version", "", "the release version")
	mtime := fs.Int64("mtime", 0, "the SBOM's timestamp, seconds since the epoch")
	lock := fs.String("debian-lock", "", "the Debian package lock the image was built from (none for the static image)")
	out := fs.String("out", "", "the SBOM to write")
	parse(fs, args)
	if *image == "" || *repository == "" || *version == "" || *out == "" || fs.NArg() == 0 {
		return fmt.Errorf("image-sbom: -image, -repository, -version, -out and at least one binary SBOM are required")
	}
	in := imageSBOMInput{Archive: *image, Repository: *repository, Version: *version,
		Time: time.Unix(*mtime, 0), DebianLock: *lock, BinarySBOMs: fs.Args()}
	b, err := imageSBOM(in)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}

func krewCommand(args []string) error {
	fs := flag.NewFlagSet("krew", flag.ExitOnError)
	dir := fs.String("dir", "", "the release folder holding the archives")
	version := fs.String("version", "", "the release version")
	url := fs.String("url", "", "where the release folder is published (the archives are at URL/NAME)")
	homepage := fs.String("homepage", defaultHomepage, "the project's home page")
	parse(fs, args)
	if *dir == "" || *version == "" || *url == "" {
		return fmt.Errorf("krew: -dir, -version and -url are required")
	}
	name, err := writeKrewManifest(*dir, *version, strings.TrimSuffix(*url, "/"), *homepage)
	if err == nil {
		fmt.Println("wrote", name)
	}
	return err
}

func sumsCommand(args []string) error {
	fs := flag.NewFlagSet("sums", flag.ExitOnError)
	dir := fs.String("dir", "", "the release folder")
	parse(fs, args)
	if *dir == "" {
		return fmt.Errorf("sums: -dir is required")
	}
	return writeSums(*dir)
}

// rewriteFile replaces name's content by f's answer, keeping its mode.
func rewriteFile(name string, f func([]byte) ([]byte, error)) error {
	st, err := os.Stat(name)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	if b, err = f(b); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return os.WriteFile(name, b, st.Mode().Perm())
}
