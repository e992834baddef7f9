package diagnose

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"fenced.io/fenced/pkg/vocab"
)

// RecreatePatch is the merge patch that switches a Deployment to the
// Recreate strategy (rollingUpdate must go with it, or the API server
// rejects the change).
const RecreatePatch = `{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}`

// multiAttachVolume finds the volume in the attach/detach controller's
// FailedAttachVolume Event when another node holds the volume. Its words
// changed in Kubernetes v1.37: `Multi-Attach error for volume "pvc-…"
// Volume is already …` until v1.36, `Waiting for detach for volume
// "pvc-…" Volume is already …` since.
var multiAttachVolume = regexp.MustCompile(`(?:Multi-Attach error|Waiting for detach) for volume "([^"]+)"`)

// MultiAttachVolume reports whether message is the attach/detach
// controller's "another node holds the volume" (Multi-Attach error), and
// of which volume, in the words of any supported Kubernetes version.
func MultiAttachVolume(message string) (volume string, ok bool) {
	m := multiAttachVolume.FindStringSubmatch(message)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// IsMultiAttach reports whether message is the attach/detach controller's
// "another node holds the volume", in the words of any supported version.
func IsMultiAttach(message string) bool {
	_, ok := MultiAttachVolume(message)
	return ok
}

// index holds the Snapshot's objects by name.
type index struct {
	s         Snapshot
	nodes     map[string]*corev1.Node
	pvs       map[string]*corev1.PersistentVolume
	pvcs      map[string]*corev1.PersistentVolumeClaim // namespace/name
	pods      map[string]*corev1.Pod                   // namespace/name
	vas       map[string][]*storagev1.VolumeAttachment // by PV name
	rss       map[string]*appsv1.ReplicaSet            // namespace/name
	deploys   map[string]*appsv1.Deployment            // namespace/name
	events    map[string][]*corev1.Event               // by pod namespace/name, Multi-Attach only
	podsOnPVC map[string][]*corev1.Pod                 // unfinished pods by claim namespace/name
}

func newIndex(s Snapshot) *index {
	ix := &index{s: s, nodes: map[string]*corev1.Node{}, pvs: map[string]*corev1.PersistentVolume{},
		pvcs: map[string]*corev1.PersistentVolumeClaim{}, pods: map[string]*corev1.Pod{},
		vas: map[string][]*storagev1.VolumeAttachment{}, rss: map[string]*appsv1.ReplicaSet{},
		deploys: map[string]*appsv1.Deployment{}, events: map[string][]*corev1.Event{}, podsOnPVC: map[string][]*corev1.Pod{}}
	for _, n := range s.Nodes {
		ix.nodes[n.Name] = n
	}
	for _, pv := range s.PVs {
		ix.pvs[pv.Name] = pv
	}
	for _, c := range s.PVCs {
		ix.pvcs[c.Namespace+"/"+c.Name] = c
	}
	for _, p := range s.Pods {
		ix.pods[p.Namespace+"/"+p.Name] = p
		if Finished(p) {
			continue
		}
		for _, c := range claimsOf(p) {
			ix.podsOnPVC[p.Namespace+"/"+c] = append(ix.podsOnPVC[p.Namespace+"/"+c], p)
		}
	}
	for _, va := range s.VolumeAttachments {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
			ix.vas[*pv] = append(ix.vas[*pv], va)
		}
	}
	for _, rs := range s.ReplicaSets {
		ix.rss[rs.Namespace+"/"+rs.Name] = rs
	}
	for _, d := range s.Deployments {
		ix.deploys[d.Namespace+"/"+d.Name] = d
	}
	for _, e := range s.Events {
		if vocab.EventReason(e.Reason) != vocab.EventFailedAttachVolume || e.InvolvedObject.Kind != "Pod" || !IsMultiAttach(e.Message) {
			continue
		}
		k := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
		ix.events[k] = append(ix.events[k], e)
	}
	return ix
}

// claims returns the claims map StaleAttachment wants.
func (ix *index) claims() map[string]*corev1.PersistentVolumeClaim { return ix.pvcs }

func claimsOf(p *corev1.Pod) []string {
	var cs []string
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			cs = append(cs, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return cs
}

// stuckPod reports whether p waits for its volumes: scheduled or not, it
// has not started (Pending) and has not been deleted.
func stuckPod(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodRunning && !Finished(p) && p.DeletionTimestamp == nil
}

// exclusive reports whether claim c (or its volume) may be attached to one
// node only.
func exclusive(c *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) bool {
	modes := c.Spec.AccessModes
	if pv != nil && len(pv.Spec.AccessModes) > 0 {
		modes = pv.Spec.AccessModes
	}
	if slices.Contains(modes, corev1.ReadWriteMany) || slices.Contains(modes, corev1.ReadOnlyMany) {
		return false
	}
	return slices.Contains(modes, corev1.ReadWriteOnce) || slices.Contains(modes, corev1.ReadWriteOncePod)
}

func rwop(c *corev1.PersistentVolumeClaim) bool {
	return slices.Contains(c.Spec.AccessModes, corev1.ReadWriteOncePod)
}

// candidate is one pod and one of its volumes that may be stuck.
type candidate struct {
	pod   *corev1.Pod
	claim *corev1.PersistentVolumeClaim
	pv    string
}

// Diagnose explains every pod that cannot attach a volume: a pod with a
// Multi-Attach FailedAttachVolume Event, a pod not running whose exclusive
// volume is attached to another node, whose VolumeAttachment reports an
// attach error, or whose ReadWriteOncePod claim another pod holds. Each
// gets one Finding per volume; with opts.Risks the latent risks follow.
func Diagnose(s Snapshot, opts Options) Report {
	ix := newIndex(s)
	var cands []candidate
	seen := map[string]bool{}
	add := func(p *corev1.Pod, claim *corev1.PersistentVolumeClaim, pv string) {
		k := p.Namespace + "/" + p.Name + "|" + pv
		if pv == "" && claim != nil {
			k += claim.Name
		}
		if !seen[k] {
			seen[k] = true
			cands = append(cands, candidate{p, claim, pv})
		}
	}
	// The Events first: they are what the user saw.
	for k, evs := range ix.events {
		p := ix.pods[k]
		if p == nil || !stuckPod(p) {
			continue // gone or running since: the Event is history
		}
		for _, e := range evs {
			if pv, ok := MultiAttachVolume(e.Message); ok {
				add(p, ix.claimOfPV(p, pv), pv)
			}
		}
	}
	// Then the state itself, which the controller may not have reported
	// yet (or whose Events have expired).
	for _, p := range s.Pods {
		if !stuckPod(p) {
			continue
		}
		for _, cn := range claimsOf(p) {
			c := ix.pvcs[p.Namespace+"/"+cn]
			if c == nil {
				continue
			}
			pv := ix.pvs[c.Spec.VolumeName]
			if rwop(c) && len(ix.otherUsers(p, c)) > 0 {
				add(p, c, c.Spec.VolumeName)
				continue
			}
			if c.Spec.VolumeName == "" || p.Spec.NodeName == "" || !exclusive(c, pv) {
				continue
			}
			for _, va := range ix.vas[c.Spec.VolumeName] {
				if va.Spec.NodeName != p.Spec.NodeName || attachError(va) != "" {
					add(p, c, c.Spec.VolumeName)
				}
			}
		}
	}
	var r Report
	for _, c := range cands {
		f := ix.finding(c)
		if opts.keep(f) {
			r.Findings = append(r.Findings, f)
		}
	}
	slices.SortFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Volume, b.Volume))
	})
	if opts.Risks {
		r.Risks = ix.risks(opts)
	}
	return r
}

func (o Options) keep(f Finding) bool {
	ns, name, _ := strings.Cut(f.Pod, "/")
	switch {
	case o.Namespace != "" && ns != o.Namespace:
		return false
	case o.Pod != "" && name != o.Pod:
		return false
	case o.Claim != "" && f.Claim != ns+"/"+o.Claim:
		return false
	case o.Node != "" && f.Node != o.Node && f.HeldBy != o.Node:
		return false
	}
	return true
}

// claimOfPV is p's claim bound to PersistentVolume pv, or nil.
func (ix *index) claimOfPV(p *corev1.Pod, pv string) *corev1.PersistentVolumeClaim {
	for _, cn := range claimsOf(p) {
		if c := ix.pvcs[p.Namespace+"/"+cn]; c != nil && c.Spec.VolumeName == pv {
			return c
		}
	}
	return nil
}

// otherUsers are the unfinished pods other than p that use claim c.
func (ix *index) otherUsers(p *corev1.Pod, c *corev1.PersistentVolumeClaim) []*corev1.Pod {
	var out []*corev1.Pod
	for _, q := range ix.podsOnPVC[c.Namespace+"/"+c.Name] {
		if q.Name != p.Name {
			out = append(out, q)
		}
	}
	return out
}

// attachError is the CSI driver's attach or detach error on va, or "".
func attachError(va *storagev1.VolumeAttachment) string {
	switch {
	case va.Status.DetachError != nil:
		return "detach error: " + va.Status.DetachError.Message
	case va.Status.AttachError != nil:
		return "attach error: " + va.Status.AttachError.Message
	}
	return ""
}

// holder is the VolumeAttachment of pv on a node other than the pod's
// (the one that keeps it from attaching), else one with an error on the
// pod's own node.
func (ix *index) holder(p *corev1.Pod, pv string) *storagev1.VolumeAttachment {
	var own *storagev1.VolumeAttachment
	for _, va := range ix.vas[pv] {
		if va.Spec.NodeName != p.Spec.NodeName {
			return va
		}
		if attachError(va) != "" {
			own = va
		}
	}
	return own
}

func (ix *index) finding(c candidate) Finding {
	p := c.pod
	f := Finding{Pod: p.Namespace + "/" + p.Name, Node: p.Spec.NodeName, Volume: c.pv, Since: ix.since(p)}
	f.Proof = append(f.Proof, ix.podFact(p))
	if c.claim != nil {
		f.Claim = c.claim.Namespace + "/" + c.claim.Name
		f.Proof = append(f.Proof, claimFact(c.claim))
	}
	// ReadWriteOncePod: the scheduler or the kubelet keeps the second pod
	// out wherever it is, attachment or not.
	if c.claim != nil && rwop(c.claim) {
		if others := ix.otherUsers(p, c.claim); len(others) > 0 {
			q := others[0]
			f.Cause = CauseReadWriteOncePod
			f.HeldBy = q.Spec.NodeName
			f.Summary = fmt.Sprintf("claim %s is ReadWriteOncePod and pod %s/%s uses it: only one pod may, whatever the node", f.Claim, q.Namespace, q.Name)
			f.Proof = append(f.Proof, ix.podFact(q))
			f.Fix = Fix{Action: FixManual, Command: fmt.Sprintf("kubectl -n %s get pod %s -o wide   # end that pod, or give each pod its own claim", q.Namespace, q.Name)}
			return f
		}
	}
	va := ix.holder(p, c.pv)
	if va == nil {
		f.Cause = CauseUnknown
		f.Summary = fmt.Sprintf("no VolumeAttachment of %s on another node any more: the attach/detach controller retries on its own", c.pv)
		f.Fix = Fix{Action: FixWait, Command: fmt.Sprintf("kubectl -n %s describe pod %s", p.Namespace, p.Name)}
		return f
	}
	f.HeldBy, f.Attachment = va.Spec.NodeName, va.Name
	f.Proof = append(f.Proof, ix.vaFact(va))
	pv := ix.pvs[c.pv]
	n := ix.nodes[va.Spec.NodeName]
	deleteVA := Fix{Action: FixDeleteAttachment, Command: "kubectl delete volumeattachment " + va.Name, Automatic: true}

	switch {
	case n == nil:
		f.Cause = CauseDeletedNode
		f.Summary = fmt.Sprintf("volume %s is attached to node %s, which no longer exists", c.pv, va.Spec.NodeName)
		f.Proof = append(f.Proof, Fact{Object: "node/" + va.Spec.NodeName, Says: "not found"})
		deleteVA.Refusals = StaleAttachment(Attachment{VA: va, Volume: pv})
		f.Fix = deleteVA
		return f
	case !NodeReady(n):
		f.Proof = append(f.Proof, ix.nodeFact(n, pv))
		f.Cause = CauseDeadNode
		f.Summary = fmt.Sprintf("volume %s is attached to node %s, which is not Ready: its pods cannot release it", c.pv, n.Name)
		f.Fenced, f.Fix = ix.fenced(n, c.pv)
		return f
	}
	f.Proof = append(f.Proof, ix.nodeFact(n, pv))
	if e := attachError(va); e != "" && va.Spec.NodeName == p.Spec.NodeName {
		// The pod's own attachment fails: the driver says why.
		f.Cause = CauseAttachError
		f.Summary = fmt.Sprintf("the CSI driver %s reports on VolumeAttachment %s: %s", va.Spec.Attacher, va.Name, e)
		f.Fix = Fix{Action: FixManual, Command: fmt.Sprintf("kubectl describe volumeattachment %s   # then the logs of the %s controller (external-attacher)", va.Name, va.Spec.Attacher)}
		return f
	}
	// The holding node is alive: who there uses the volume?
	var users []*corev1.Pod
	for _, q := range ix.s.Pods {
		if q.Spec.NodeName != n.Name || Finished(q) {
			continue
		}
		if uses, _ := PodUsesVolume(q, c.pv, ix.claims()); uses {
			users = append(users, q)
		}
	}
	if len(users) == 0 {
		f.Cause = CauseStaleAttachment
		refusals := StaleAttachment(Attachment{VA: va, Node: n, Volume: pv, Pods: ix.podsOn(n.Name), Claims: ix.claims()})
		if va.DeletionTimestamp != nil {
			// The controller asked for the detach; the driver does not do
			// it. Deleting again changes nothing: the finalizer must go.
			why := "the CSI driver reports no error"
			if e := attachError(va); e != "" {
				why = "the CSI driver reports a " + e
			}
			f.Summary = fmt.Sprintf("volume %s is still attached to node %s, which is Ready and where no pod uses it: its VolumeAttachment has been waiting to be detached for %s, and %s",
				c.pv, n.Name, duration.HumanDuration(ix.s.Now.Sub(va.DeletionTimestamp.Time)), why)
			f.Fix = Fix{Action: FixReleaseAttachment, Automatic: true, Refusals: refusals,
				Command: fmt.Sprintf("kubectl patch volumeattachment %s --type=merge -p '{\"metadata\":{\"finalizers\":null}}'   # only once nothing on %s uses it", va.Name, n.Name)}
			return f
		}
		f.Summary = fmt.Sprintf("volume %s is still attached to node %s, which is Ready, but no pod there uses it", c.pv, n.Name)
		deleteVA.Refusals = refusals
		f.Fix = deleteVA
		return f
	}
	q := users[0]
	f.Proof = append(f.Proof, ix.podFact(q))
	d, dq := ix.deploymentOf(p), ix.deploymentOf(q)
	switch {
	case q.DeletionTimestamp != nil:
		f.Cause = CauseVolumeInUse
		f.Summary = fmt.Sprintf("pod %s/%s on node %s is terminating and still uses volume %s: it is released when that pod ends", q.Namespace, q.Name, n.Name, c.pv)
		f.Fix = Fix{Action: FixWait, Command: fmt.Sprintf("kubectl -n %s get pod %s -w", q.Namespace, q.Name)}
	case d != nil && d == dq && ownerName(p) != ownerName(q) && rollingUpdate(d):
		f.Cause = CauseRollingUpdate
		f.Summary = fmt.Sprintf("deployment %s/%s rolls out with RollingUpdate: its new pod waits on node %s for volume %s, which its old pod %s still uses on node %s, and the old pod ends only when the new one is Ready",
			d.Namespace, d.Name, p.Spec.NodeName, c.pv, q.Name, n.Name)
		f.Proof = append(f.Proof, deploymentFact(d))
		f.Fix = Fix{Action: FixPatchWorkload, Command: patchCommand(d)}
	case d != nil && d == dq && ownerName(p) != ownerName(q):
		f.Cause = CauseVolumeInUse
		f.Summary = fmt.Sprintf("deployment %s/%s (Recreate) still runs its old pod %s on node %s: the volume is released when it ends", d.Namespace, d.Name, q.Name, n.Name)
		f.Fix = Fix{Action: FixWait, Command: fmt.Sprintf("kubectl -n %s rollout status deployment %s", d.Namespace, d.Name)}
	default:
		f.Cause = CauseSharedClaim
		f.Summary = fmt.Sprintf("pod %s/%s (%s) runs on node %s and uses the same ReadWriteOnce volume %s: both cannot run on two nodes", q.Namespace, q.Name, ownerText(q), n.Name, c.pv)
		f.Fix = Fix{Action: FixManual, Command: fmt.Sprintf("kubectl -n %s get pods -o wide --field-selector spec.nodeName=%s   # give each workload its own claim, or schedule them on one node", q.Namespace, n.Name)}
	}
	return f
}

// fenced says what fenced does about dead node n, and the fix.
func (ix *index) fenced(n *corev1.Node, pv string) (string, Fix) {
	nf, known := ix.s.Fencing[n.Name]
	confirm := Fix{Action: FixConfirmNode, Automatic: true,
		Command: fmt.Sprintf("fenced confirm %s --reason \"checked: powered off\"   # only once you know it is off", n.Name)}
	switch {
	case nf.Tainted && nf.ByFenced && nf.Evidence != nil:
		s := "tainted out-of-service by fenced: " + nf.Evidence.Summary()
		if !nf.Evidence.At.IsZero() {
			s += ", " + ago(nf.Evidence.At, ix.s.Now)
		}
		return s, Fix{Action: FixWait, Command: fmt.Sprintf("kubectl get volumeattachment -o wide | grep %s   # the attach/detach controller detaches now", pv)}
	case nf.Tainted && nf.ByFenced:
		return "tainted out-of-service by fenced, evidence unreadable: " + nf.EvidenceError, Fix{Action: FixWait}
	case nf.Tainted:
		return "tainted out-of-service by someone else (not fenced): the volume is detached without fenced", Fix{Action: FixWait}
	}
	var parts []string
	if e := nf.LastEvent; e != nil {
		parts = append(parts, fmt.Sprintf("fenced: %s %s: %s", e.Reason, ago(e.Time, ix.s.Now), e.Message))
	} else {
		parts = append(parts, "no Event from fenced about this node (is the fencer running?)")
	}
	if nf.Configured != nil && !*nf.Configured {
		parts = append(parts, "no fencing configured for it: it needs `fenced confirm`")
	}
	if nf.Fenceable != nil && !*nf.Fenceable {
		parts = append(parts, "no working fence device ("+nf.FenceableSays+")")
	}
	if !known {
		parts = parts[:1]
	}
	return strings.Join(parts, "; "), confirm
}

// podsOn are the pods bound to node.
func (ix *index) podsOn(node string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range ix.s.Pods {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out
}

// since is when p was first seen unable to attach.
func (ix *index) since(p *corev1.Pod) time.Time {
	t := p.CreationTimestamp.Time
	first := time.Time{}
	for _, e := range ix.events[p.Namespace+"/"+p.Name] {
		if et := eventFirst(e); !et.IsZero() && (first.IsZero() || et.Before(first)) {
			first = et
		}
	}
	if !first.IsZero() {
		return first
	}
	return t
}

func eventFirst(e *corev1.Event) time.Time {
	switch {
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func eventLast(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return eventFirst(e)
}

// EventTime is when e last happened, whichever of its time fields the
// recorder filled in.
func EventTime(e *corev1.Event) time.Time { return eventLast(e) }

func (ix *index) podFact(p *corev1.Pod) Fact {
	where := "not scheduled"
	if p.Spec.NodeName != "" {
		where = "on node " + p.Spec.NodeName
	}
	state := string(p.Status.Phase)
	if p.DeletionTimestamp != nil {
		state = "Terminating"
	}
	says := fmt.Sprintf("%s %s, created %s, %s", state, where, ago(p.CreationTimestamp.Time, ix.s.Now), ownerText(p))
	evs := ix.events[p.Namespace+"/"+p.Name]
	if len(evs) > 0 {
		count := int32(0)
		last := evs[0]
		for _, e := range evs {
			count += max(e.Count, 1)
			if eventLast(e).After(eventLast(last)) {
				last = e
			}
		}
		says += fmt.Sprintf("; FailedAttachVolume x%d, last %s: %s", count, ago(eventLast(last), ix.s.Now), firstLine(last.Message))
	}
	return Fact{Object: "pod/" + p.Namespace + "/" + p.Name, Says: says}
}

func claimFact(c *corev1.PersistentVolumeClaim) Fact {
	modes := make([]string, len(c.Spec.AccessModes))
	for i, m := range c.Spec.AccessModes {
		modes[i] = string(m)
	}
	return Fact{Object: "pvc/" + c.Namespace + "/" + c.Name,
		Says: fmt.Sprintf("%s, %s, bound to %s", c.Status.Phase, strings.Join(modes, ","), orUnnamed(c.Spec.VolumeName))}
}

func (ix *index) vaFact(va *storagev1.VolumeAttachment) Fact {
	says := fmt.Sprintf("attacher %s, node %s, attached=%t, created %s", va.Spec.Attacher, va.Spec.NodeName, va.Status.Attached, ago(va.CreationTimestamp.Time, ix.s.Now))
	if va.DeletionTimestamp != nil {
		says += ", being deleted"
	}
	if e := attachError(va); e != "" {
		says += ", " + e
	}
	return Fact{Object: "volumeattachment/" + va.Name, Says: says}
}

func (ix *index) nodeFact(n *corev1.Node, pv *corev1.PersistentVolume) Fact {
	says := "no Ready condition"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			says = fmt.Sprintf("Ready=%s for %s", c.Status, duration.HumanDuration(ix.s.Now.Sub(c.LastTransitionTime.Time)))
			if c.Reason != "" {
				says += " (" + c.Reason + ")"
			}
		}
	}
	if name := UniqueVolumeName(pv); name != "" && NodeReady(n) {
		if slices.Contains(n.Status.VolumesInUse, corev1.UniqueVolumeName(name)) {
			says += "; status.volumesInUse lists the volume (mounted)"
		} else {
			says += "; status.volumesInUse does not list the volume"
		}
	}
	return Fact{Object: "node/" + n.Name, Says: says}
}

func deploymentFact(d *appsv1.Deployment) Fact {
	return Fact{Object: "deployment/" + d.Namespace + "/" + d.Name, Says: "strategy " + strategy(d)}
}

// ownerName is the controller owning p, kind/name, or "".
func ownerName(p metav1.Object) string {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.Kind + "/" + ref.Name
	}
	return ""
}

func ownerText(p *corev1.Pod) string {
	if o := ownerName(p); o != "" {
		return "owned by " + o
	}
	return "no controller"
}

// deploymentOf is the Deployment whose ReplicaSet owns p, or nil.
func (ix *index) deploymentOf(p *corev1.Pod) *appsv1.Deployment {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return nil
	}
	rs := ix.rss[p.Namespace+"/"+ref.Name]
	if rs == nil {
		return nil
	}
	dref := metav1.GetControllerOf(rs)
	if dref == nil || dref.Kind != "Deployment" {
		return nil
	}
	return ix.deploys[p.Namespace+"/"+dref.Name]
}

func strategy(d *appsv1.Deployment) string {
	if d.Spec.Strategy.Type == "" {
		return string(appsv1.RollingUpdateDeploymentStrategyType) + " (the default)"
	}
	return string(d.Spec.Strategy.Type)
}

func rollingUpdate(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type == "" || d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType
}

func patchCommand(d *appsv1.Deployment) string {
	return fmt.Sprintf("kubectl -n %s patch deployment %s -p '%s'", d.Namespace, d.Name, RecreatePatch)
}

// ago is t as an age ("4m ago"), or "at an unknown time".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "at an unknown time"
	}
	return duration.HumanDuration(now.Sub(t)) + " ago"
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
