package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/credentials"
)

func newCredentialsCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "credentials",
		Short: "Issue the API credential of a systemd-run agent (deploy/systemd)",
	}
	cmd.AddCommand(newCredentialsIssueCommand(g))
	return cmd
}

func newCredentialsIssueCommand(g *globals) *cobra.Command {
	var (
		req                credentials.Request
		files              credentials.Files
		server, caFile     string
		defaultCredentials = "client.pem beside --out"
	)
	cmd := &cobra.Command{
		Use:   "issue NODE --out KUBECONFIG",
		Short: "Issue, check and write a short-lived client certificate for NODE's agent",
		Long: `Give the agent on a systemd host its own API credential: a client certificate
for user fenced:node:NODE in group fenced:fencers (--group fenced:observers for
an observer-only host), signed by the cluster's kubernetes.io/kube-apiserver-client
signer. The agent identity policy lets that user speak for NODE, and that group
take fencers' power Leases: it is a fencer's power, and an approved certificate
cannot be revoked.

Run it on the host, as root, with your own (admin) kubeconfig. It:
  - generates the private key here (it never leaves this host);
  - creates a CertificateSigningRequest under a name the API server generates
    (no name can be taken before you, as the old fixed name could);
  - checks the CSR the API server stored before approving it: the requester is
    you (a SelfSubjectReview), the subject is CN=fenced:node:NODE, O=the group
    and nothing else, the key is the one just generated, the signer, usage
    client auth and the lifetime are those asked for. Anything else is denied,
    never approved;
  - approves exactly the version it checked, waits for the certificate, checks
    its key, subject and expiry, and that the API server takes it for
    fenced:node:NODE in the group;
  - writes the certificate and key to one file (--cert-out) and a kubeconfig
    (--out) that refers to it. Existing files keep their mode and owner; new
    ones are 0600.

Renew by running it again before the certificate expires (it prints when): a
running agent picks the new file up within 5 minutes, no restart needed.

It needs: create selfsubjectreviews; create and get certificatesigningrequests;
update certificatesigningrequests/approval; approve on
signers/kubernetes.io/kube-apiserver-client (cluster admins have these).

Exit codes: 0 issued and written, 1 refused (the message names what did not
match) or failed, 2 usage error, 3 could not check (API server unreachable, or
it would not say who you are).`,
		Example: `  # on the host, as root: a week-long credential for this host's fencer
  fenced credentials issue "$(hostname)" --out /etc/fenced/kubeconfig \
      --server https://10.0.0.10:6443 --kubeconfig /etc/kubernetes/admin.conf

  # an observer-only host, valid one day
  fenced credentials issue worker-7 --group fenced:observers --duration 24h --out /etc/fenced/kubeconfig`,
		Args:              exactlyOneNode,
		ValidArgsFunction: g.completeNodes(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			usage := func(err error) error { return &usageError{command: cmd.CommandPath(), err: err} }
			req.Node = args[0]
			if err := req.Validate(); err != nil {
				return usage(err)
			}
			if files.Kubeconfig == "" {
				return usage(errors.New("--out KUBECONFIG is required: where the agent's kubeconfig goes"))
			}
			if files.CredentialPEM == defaultCredentials {
				files.CredentialPEM = filepath.Join(filepath.Dir(files.Kubeconfig), "client.pem")
			}
			rc, err := g.restConfig()
			if err != nil {
				return err
			}
			if server == "" {
				server = rc.Host
			}
			ca := rc.CAData
			if caFile == "" && len(ca) == 0 && rc.CAFile != "" {
				caFile = rc.CAFile
			}
			if caFile != "" {
				if ca, err = os.ReadFile(caFile); err != nil {
					return usage(fmt.Errorf("--certificate-authority: %w", err))
				}
			}
			if len(ca) == 0 {
				return usage(errors.New("your kubeconfig has no CA for the API server: pass --certificate-authority FILE"))
			}
			client, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			agent := *rc
			agent.Host, agent.CAData, agent.CAFile = server, ca, ""
			issuer := &credentials.Issuer{Client: client, Out: g.stdout}
			err = issuer.IssueTo(cmd.Context(), req, &agent, files)
			if errors.Is(err, credentials.ErrCannotCheck) {
				return &codedError{code: exitCannotCheck, err: err}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "Wrote %s and %s (server %s).\n", files.Kubeconfig, files.CredentialPEM, server)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&files.Kubeconfig, "out", "", "the agent's kubeconfig to write (e.g. /etc/fenced/kubeconfig)")
	fl.StringVar(&files.CredentialPEM, "cert-out", defaultCredentials, "the file for the certificate and its key, which the kubeconfig refers to")
	fl.StringVar(&req.Group, "group", credentials.GroupFencers, "the certificate's group: "+credentials.GroupFencers+" or "+credentials.GroupObservers)
	fl.DurationVar(&req.Duration, "duration", credentials.DefaultDuration, "the certificate's lifetime (spec.expirationSeconds; 10m to 2160h)")
	fl.DurationVar(&req.Wait, "wait", credentials.DefaultWait, "how long to wait for the signer")
	fl.StringVar(&server, "server", "", "the API server address for the agent (default: your kubeconfig's); prefer a load balancer")
	fl.StringVar(&caFile, "certificate-authority", "", "the API server's CA file for the agent (default: your kubeconfig's)")
	return cmd
}
