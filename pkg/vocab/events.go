package vocab

// EventReason is the reason of a Kubernetes Event. Every reason fenced
// records is declared below, once, and nowhere else (TestEventCatalogue
// checks that no recorder call outside this package names any other).
//
// The values are stable: operators' alerts, the runbooks and the
// end-to-end tests match on them, so a value never changes — a new
// wording is a new reason. Each constant is named "Event" followed by its
// value, so that the value seen in `kubectl get events` finds its
// declaration by grep.
type EventReason string

// The decision core's Events on a Node (pkg/fencing/core), in the order a
// failure walks through them. Safety alarms are marked: they are Warnings
// that mean fenced's inputs contradict each other.
const (
	// EventNodeSuspected: the node stopped answering on a channel; no
	// evidence yet.
	EventNodeSuspected EventReason = "NodeSuspected"
	// EventNodeShuttingDown: the node is shutting down; fenced waits for
	// its agent's clean-shutdown word before asking the power device.
	EventNodeShuttingDown EventReason = "NodeShuttingDown"
	// EventNodeResponsive: the suspicion is over; the node answers again.
	EventNodeResponsive EventReason = "NodeResponsive"
	// EventCannotConfirmPowerState: no power device of the node gave a
	// reading that is evidence (none configured, wrong machine, an error).
	EventCannotConfirmPowerState EventReason = "CannotConfirmPowerState"
	// EventNodeUnresponsiveButPoweredOn: the power device reads the
	// unresponsive node on, so it is not tainted.
	EventNodeUnresponsiveButPoweredOn EventReason = "NodeUnresponsiveButPoweredOn"
	// EventPoweringOffUnresponsiveNode: power-off mode switches the node
	// off under the power Lease.
	EventPoweringOffUnresponsiveNode EventReason = "PoweringOffUnresponsiveNode"
	// EventFenceOrdered: the watchdog level wrote a fence order for the
	// node's boot; its watchdog resets it (docs/design.md §10).
	EventFenceOrdered EventReason = "FenceOrdered"
	// EventWatchdogResetContradicted: the node answered, in the boot a
	// fence order was for, after the wait that bounds its watchdog's reset:
	// its watchdog did not reset it. A safety alarm: no taint was written
	// on it, and its watchdog cannot be trusted until a person looks.
	EventWatchdogResetContradicted EventReason = "WatchdogResetContradicted"
	// EventPowerOffAborted: a power-off was cancelled before it was sent
	// (the node answered again, or a check failed at the last moment).
	EventPowerOffAborted EventReason = "PowerOffAborted"
	// EventPowerOffFailed: the power device did not switch the node off.
	EventPowerOffFailed EventReason = "PowerOffFailed"
	// EventNodeFenced: the out-of-service taint is on, with its evidence.
	EventNodeFenced EventReason = "NodeFenced"
	// EventPoweringOnAfterFence: with policy.afterFence "on", fenced
	// switches a node it switched off on again once its volumes are
	// released.
	EventPoweringOnAfterFence EventReason = "PoweringOnAfterFence"
	// EventWaitingForVolumeAttachments: the node is back on a new boot;
	// the taint stays until its old VolumeAttachments are gone.
	EventWaitingForVolumeAttachments EventReason = "WaitingForVolumeAttachments"
	// EventCannotVerifyReboot: the node answers again but reports no boot
	// ID, so fenced cannot tell it rebooted; the taint stays.
	EventCannotVerifyReboot EventReason = "CannotVerifyReboot"
	// EventNodeRecovered: the node is back with a new boot ID; fenced's
	// taint is off, and the controller-manager has observed that.
	EventNodeRecovered EventReason = "NodeRecovered"
	// EventWaitingForControllerManager: the out-of-service taint is off,
	// and fenced's returning taint stays until the controller-manager has
	// observed that (a Warning once that takes long), or until the node is
	// uncordoned (Normal, when someone else cordoned it).
	EventWaitingForControllerManager EventReason = "WaitingForControllerManager"
	// EventFencedNodeBackWithSameBootID (safety alarm): a node fenced as
	// off answers with the boot it had before — the evidence was wrong.
	EventFencedNodeBackWithSameBootID EventReason = "FencedNodeBackWithSameBootID"
	// EventCleanShutdownStorm (safety alarm): too many nodes were tainted
	// on their own clean-shutdown word within the storm window; this one's
	// word is not taken.
	EventCleanShutdownStorm EventReason = "CleanShutdownStorm"
	// EventFenceEvidenceVoided: the evidence for a taint not yet written
	// is too old or stamped before what it must follow; fenced reads the
	// power again instead of tainting on it.
	EventFenceEvidenceVoided EventReason = "FenceEvidenceVoided"
	// EventPowerReadingContradicted (safety alarm): a power device read off
	// a node that was alive after the reading in the same boot.
	EventPowerReadingContradicted EventReason = "PowerReadingContradicted"
	// EventEvidenceFromNewerFenced: the node is fenced with evidence in a
	// format newer than this fencer reads (a newer fenced wrote it); this
	// fencer leaves the node alone until it is upgraded.
	EventEvidenceFromNewerFenced EventReason = "EvidenceFromNewerFenced"
	// EventFencedNodeDeleted: the Node object of a fenced node was
	// deleted; its taint and evidence went with it.
	EventFencedNodeDeleted EventReason = "FencedNodeDeleted"
	// EventFencedNodeRegisteredAgain: a node whose Node object was deleted
	// while fenced registered again on a new boot, with no taint.
	EventFencedNodeRegisteredAgain EventReason = "FencedNodeRegisteredAgain"
)

// The core's Events of an action the operator's switches hold back
// (pkg/fencing/core/hold.go): the switch, "Would", and the verb of the
// action. policy.dryRun holds every effect, as does the cluster-wide pause;
// an exclusion label holds reads and every effect but removing fenced's own
// taint.
const (
	EventDryRunWouldTaint        EventReason = "DryRunWouldTaint"
	EventDryRunWouldRemoveTaint  EventReason = "DryRunWouldRemoveTaint"
	EventDryRunWouldMarkNotReady EventReason = "DryRunWouldMarkNotReady"
	EventDryRunWouldDeletePods   EventReason = "DryRunWouldDeletePods"
	EventDryRunWouldPowerOff     EventReason = "DryRunWouldPowerOff"
	EventDryRunWouldPowerOn      EventReason = "DryRunWouldPowerOn"

	EventPausedWouldTaint        EventReason = "PausedWouldTaint"
	EventPausedWouldRemoveTaint  EventReason = "PausedWouldRemoveTaint"
	EventPausedWouldMarkNotReady EventReason = "PausedWouldMarkNotReady"
	EventPausedWouldDeletePods   EventReason = "PausedWouldDeletePods"
	EventPausedWouldPowerOff     EventReason = "PausedWouldPowerOff"
	EventPausedWouldPowerOn      EventReason = "PausedWouldPowerOn"

	EventExcludedWouldReadPower    EventReason = "ExcludedWouldReadPower"
	EventExcludedWouldTaint        EventReason = "ExcludedWouldTaint"
	EventExcludedWouldMarkNotReady EventReason = "ExcludedWouldMarkNotReady"
	EventExcludedWouldDeletePods   EventReason = "ExcludedWouldDeletePods"
	EventExcludedWouldPowerOff     EventReason = "ExcludedWouldPowerOff"
	EventExcludedWouldPowerOn      EventReason = "ExcludedWouldPowerOn"
)

// Lifting fenced's returning taint, held back by dry-run or the pause (an
// exclusion label does not hold it: it ends a fence).
const (
	EventDryRunWouldLiftReturning EventReason = "DryRunWouldLiftReturning"
	EventPausedWouldLiftReturning EventReason = "PausedWouldLiftReturning"
)

// The fencer's Events (pkg/fencing).
const (
	// EventCannotBeFencedAutomatically: the device monitor found that no
	// fencing level of the node answers.
	EventCannotBeFencedAutomatically EventReason = "CannotBeFencedAutomatically"
	// EventFenceDevicesAnswer: a fencing level of the node answers again.
	EventFenceDevicesAnswer EventReason = "FenceDevicesAnswer"
	// EventPowerDeviceReadsOffLiveNode (safety alarm): a fencing level of
	// a Ready node reads off while its agent answers — the inventory is
	// wrong.
	EventPowerDeviceReadsOffLiveNode EventReason = "PowerDeviceReadsOffLiveNode"
	// EventFencingPaused, on the pause ConfigMap: the cluster-wide pause is
	// on.
	EventFencingPaused EventReason = "FencingPaused"
	// EventFencingResumed, on the pause ConfigMap: the pause is off.
	EventFencingResumed EventReason = "FencingResumed"
)

// The agent's Events about its configuration file, on the fencer's own
// Node (pkg/agent).
const (
	// EventConfigurationReloaded: a changed configuration file was
	// validated and applied without a restart.
	EventConfigurationReloaded EventReason = "ConfigurationReloaded"
	// EventConfigurationRefused: a changed configuration file is invalid
	// or cannot be used; the configuration in force stays.
	EventConfigurationRefused EventReason = "ConfigurationRefused"
	// EventConfigurationNeedsRestart: a changed configuration file changes
	// settings that take effect only when the agent restarts.
	EventConfigurationNeedsRestart EventReason = "ConfigurationNeedsRestart"
)

// The taint writer's Events on a Node (pkg/taint).
const (
	// EventOutOfServiceTaintApplied: fenced put the out-of-service taint
	// on, with its evidence.
	EventOutOfServiceTaintApplied EventReason = "OutOfServiceTaintApplied"
	// EventOutOfServiceTaintRemoved: fenced took its taint off, and put
	// its returning taint in its place.
	EventOutOfServiceTaintRemoved EventReason = "OutOfServiceTaintRemoved"
	// EventReturningTaintLifted: fenced took its returning taint off (and
	// the cordon it had set), the controller-manager having observed the
	// removal of the out-of-service taint.
	EventReturningTaintLifted EventReason = "ReturningTaintLifted"
)

// The on-call commands' Events (pkg/admin).
const (
	// EventManualFenceConfirmed, a Warning on the Node next to
	// OutOfServiceTaintApplied: who ran `fenced confirm`, and why.
	EventManualFenceConfirmed EventReason = "ManualFenceConfirmed"
	// EventUnfenceForced, a Warning on the Node: `fenced unfence --force`
	// skipped the checks.
	EventUnfenceForced EventReason = "UnfenceForced"
	// EventManualPowerOff, a Warning on the Node: who ran `fenced bmc off`
	// or `fenced device off`, through which device, and why; recorded
	// before the request is sent.
	EventManualPowerOff EventReason = "ManualPowerOff"
	// EventManualPowerCycle: the same for `fenced bmc cycle` and `fenced
	// device cycle`.
	EventManualPowerCycle EventReason = "ManualPowerCycle"
	// EventPauseRequested, on the pause ConfigMap: who ran `fenced pause`,
	// and why (each fencer then says FencingPaused).
	EventPauseRequested EventReason = "PauseRequested"
	// EventResumeRequested, on the pause ConfigMap: who ran `fenced
	// resume` (each fencer then says FencingResumed).
	EventResumeRequested EventReason = "ResumeRequested"
	// EventNodeExcludedFromFencing, on the Node: who ran `fenced exclude`,
	// and why.
	EventNodeExcludedFromFencing EventReason = "NodeExcludedFromFencing"
	// EventNodeIncludedInFencing, on the Node: who ran `fenced include`.
	EventNodeIncludedInFencing EventReason = "NodeIncludedInFencing"
)

// Stale VolumeAttachments (pkg/stale's reporter in the fencer, and
// `fenced diagnose --fix`).
const (
	// EventStaleVolumeAttachment, a Warning on a pod waiting for a volume
	// that a stale VolumeAttachment holds (or on the VolumeAttachment when
	// no pod waits).
	EventStaleVolumeAttachment EventReason = "StaleVolumeAttachment"
	// EventStaleVolumeAttachmentDeleted, on a stale VolumeAttachment fenced
	// deleted and on the pods that waited for it: who, and why.
	EventStaleVolumeAttachmentDeleted EventReason = "StaleVolumeAttachmentDeleted"
	// EventStaleVolumeAttachmentReleased, on a stale VolumeAttachment stuck
	// in deletion whose finalizers fenced removed, and on the pods that
	// waited for it.
	EventStaleVolumeAttachmentReleased EventReason = "StaleVolumeAttachmentReleased"
)

// EventFlush is the reason of the marker Event pkg/taint's recorder sends
// itself to learn that every Event before it has been written. Its sink
// swallows the marker: no Event with this reason reaches the API server.
const EventFlush EventReason = "Flush"

// Kubernetes' own reasons that fenced reads (and never records).
const (
	// EventFailedAttachVolume is the attach/detach controller's Event on a
	// pod whose volume cannot be attached (a Multi-Attach error among
	// them): `fenced diagnose` starts from it.
	EventFailedAttachVolume EventReason = "FailedAttachVolume"
)
