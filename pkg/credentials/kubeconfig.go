package credentials

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Files is where the agent's credential goes.
type Files struct {
	// Kubeconfig names the API server, its CA and CredentialPEM.
	Kubeconfig string
	// CredentialPEM holds the certificate and its key. The kubeconfig
	// refers to it by path rather than embedding it, so that client-go in
	// the running agent reloads it when a renewal replaces it (it checks
	// every 5 minutes): no restart.
	CredentialPEM string
}

// Write writes the credential file, then the kubeconfig, each replaced
// atomically (a reader sees the old file or the new one). A file that
// exists keeps its mode and owner (install it 0640 root:fenced once, and
// renewals keep that); a new one is 0600.
func (f Files) Write(server string, caPEM []byte, issued *Issued) error {
	cred, err := filepath.Abs(f.CredentialPEM)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["fenced"] = &clientcmdapi.AuthInfo{ClientCertificate: cred, ClientKey: cred}
	cfg.Contexts["fenced"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "fenced"}
	cfg.CurrentContext = "fenced"
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if err := replaceFile(cred, issued.PEM); err != nil {
		return err
	}
	return replaceFile(f.Kubeconfig, kubeconfig)
}

// replaceFile writes data to a temporary file beside path and renames it
// over path, with path's mode and owner if it exists.
func replaceFile(path string, data []byte) error {
	mode, uid, gid := fs.FileMode(0o600), -1, -1
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(sys.Uid), int(sys.Gid)
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing there
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if uid >= 0 && (uid != os.Getuid() || gid != os.Getgid()) {
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return fmt.Errorf("%s: keeping its owner %d:%d: %w", path, uid, gid, err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
