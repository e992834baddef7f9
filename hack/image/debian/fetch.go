package debian

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Fetch returns the package file's bytes from cache (a directory of
// files named by their SHA-256), downloading it from the mirror into the
// cache first if it is not there. Every byte returned has been checked
// against the lock's SHA-256 and size, whether from the cache or the
// network: a corrupt cache entry is fetched again.
func Fetch(d Deb, cache string) ([]byte, error) {
	name := filepath.Join(cache, d.SHA256+".deb")
	if b, err := os.ReadFile(name); err == nil {
		if verify(d, b) == nil {
			return b, nil
		}
		_ = os.Remove(name)
	}
	b, err := download(Mirror + d.Path)
	if err != nil {
		return nil, fmt.Errorf("%s %s (%s): %w", d.Package, d.Version, d.Arch, err)
	}
	if err := verify(d, b); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(cache, ".fetch-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	return b, os.Rename(tmp.Name(), name)
}

func verify(d Deb, b []byte) error {
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != d.SHA256 || int64(len(b)) != d.Size {
		return fmt.Errorf("%s %s (%s): SHA-256 %s, %d bytes; the lock says %s, %d bytes", d.Package, d.Version, d.Arch, got, len(b), d.SHA256, d.Size)
	}
	return nil
}

var httpClient = &http.Client{Timeout: 5 * time.Minute}

// download GETs url.
func download(url string) ([]byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s (a version the mirror no longer holds: regenerate the lock)", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// Download is download for the lock program: the Packages indexes.
func Download(url string) ([]byte, error) { return download(url) }
