package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// risks lists what will cause a Multi-Attach error later (--all).
func (ix *index) risks(opts Options) []Risk {
	var out []Risk
	for _, d := range ix.s.Deployments {
		if (opts.Namespace != "" && d.Namespace != opts.Namespace) || opts.Node != "" || !rollingUpdate(d) {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			c := ix.pvcs[d.Namespace+"/"+v.PersistentVolumeClaim.ClaimName]
			if c == nil || !exclusive(c, ix.pvs[c.Spec.VolumeName]) {
				continue
			}
			out = append(out, Risk{Kind: RiskRollingUpdateRWO, Object: "deployment/" + d.Namespace + "/" + d.Name,
				Says: fmt.Sprintf("strategy %s with ReadWriteOnce claim %s: an update whose new pod lands on another node waits for ever on a Multi-Attach error", strategy(d), c.Name),
				Fix:  Fix{Action: FixPatchWorkload, Command: patchCommand(d)}})
			break
		}
	}
	for _, p := range ix.s.Pods {
		ref := ownerName(p)
		if Finished(p) || p.Spec.NodeName == "" || !strings.HasPrefix(ref, "StatefulSet/") ||
			(opts.Namespace != "" && p.Namespace != opts.Namespace) || (opts.Node != "" && p.Spec.NodeName != opts.Node) {
			continue
		}
		nf, ok := ix.s.Fencing[p.Spec.NodeName]
		why := ""
		switch {
		case !ok:
		case nf.Configured != nil && !*nf.Configured:
			why = "has no fencing configured"
		case nf.Fenceable != nil && !*nf.Fenceable:
			why = "has no working fence device (" + nf.FenceableSays + ")"
		}
		if why == "" || !ix.hasExclusiveClaim(p) {
			continue
		}
		out = append(out, Risk{Kind: RiskUnfenceable, Object: "pod/" + p.Namespace + "/" + p.Name,
			Says: fmt.Sprintf("%s with a ReadWriteOnce volume on node %s, which %s: if the node dies, the pod's replacement waits on a Multi-Attach error until someone confirms the node is off", ref, p.Spec.NodeName, why),
			Fix:  Fix{Action: FixManual, Command: fmt.Sprintf("fenced status   # then configure node %s's BMC or fencing levels, and check them with: fenced bmc status %s", p.Spec.NodeName, p.Spec.NodeName)}})
	}
	for _, n := range ix.s.Nodes {
		nf := ix.s.Fencing[n.Name]
		if nf.GracefulShutdown == nil || *nf.GracefulShutdown || (opts.Node != "" && n.Name != opts.Node) {
			continue
		}
		out = append(out, Risk{Kind: RiskNoGracefulShutdown, Object: "node/" + n.Name,
			Says: "the kubelet has no graceful node shutdown (shutdownGracePeriod; fenced's agent there finds no kubelet shutdown delay lock in logind): a clean shutdown leaves its pods and their VolumeAttachments behind",
			Fix:  Fix{Action: FixManual, Command: "set shutdownGracePeriod and shutdownGracePeriodCriticalPods in the kubelet's configuration of node " + n.Name}})
	}
	slices.SortStableFunc(out, func(a, b Risk) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Object, b.Object)) })
	return out
}

func (ix *index) hasExclusiveClaim(p *corev1.Pod) bool {
	for _, cn := range claimsOf(p) {
		if c := ix.pvcs[p.Namespace+"/"+cn]; c != nil && exclusive(c, ix.pvs[c.Spec.VolumeName]) {
			return true
		}
	}
	return false
}
