package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"fenced.io/fenced/pkg/admin"
)

// completionTimeout bounds the API request behind a completion: a shell
// that waits longer for a TAB looks hung.
const completionTimeout = 2 * time.Second

// completeNodes completes NODE arguments, at most max of them (0: any
// number), never with file names. The power commands (inventory) accept
// only the nodes the configuration names, so they offer those first and
// ask the API only when it names none; the others offer the API's Nodes,
// and the configuration's when the API does not answer in time.
func (g *globals) completeNodes(max int, inventory bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if max > 0 && len(args) >= max {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		sources := []func(*cobra.Command) []string{g.apiNodes, g.configuredNodes}
		if inventory {
			slices.Reverse(sources)
		}
		var names []string
		for _, source := range sources {
			if names = source(cmd); len(names) > 0 {
				break
			}
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) && !slices.Contains(args, n) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// apiNodes are the names of the cluster's Nodes; nil when the API server
// cannot be asked within completionTimeout.
func (g *globals) apiNodes(cmd *cobra.Command) []string {
	rc, err := g.restConfig()
	if err != nil {
		return nil
	}
	rc.Timeout = completionTimeout
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	names, _ := admin.NodeNames(ctx, client)
	return names
}

// configuredNodes are the nodes the configuration names; nil without one.
func (g *globals) configuredNodes(*cobra.Command) []string {
	cfg, err := g.loadConfig(false)
	if err != nil {
		return nil
	}
	return admin.ConfiguredNodes(cfg)
}
