package starter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// MinTemporalServer is the oldest Temporal server fanout runs on (README,
// Compatibility): the series of the server the pinned temporal CLI embeds
// (internal/tools/temporalcli: CLI 1.5.1, server 1.29.1), the one every
// test runs, and the first with task-queue fairness keys and weights.
// `starter setup` checks it.
const MinTemporalServer = "1.29.0"

// MinRedis is the oldest Redis fanout runs on (README, Compatibility): the
// dedup gate and the event record are SET key value NX GET, which Redis
// refuses before 7.0. The tests run Debian's redis-server 7.0; compose
// pins 7.4. `starter setup` checks it.
const MinRedis = "7.0.0"

// RedisCheck judges the redis_version Redis reports (INFO server); err is
// the error reading it.
func RedisCheck(version string, err error) Check {
	c := Check{What: "Redis " + MinRedis + " or later (SET ... NX GET)", Required: true, Fix: "upgrade Redis to " + MinRedis + " or later"}
	switch cmp, ok := compareVersions(version, MinRedis); {
	case err != nil:
		c.Detail = "cannot read its version: " + err.Error()
	case !ok:
		c.Detail = fmt.Sprintf("it reports version %q, which is not major.minor.patch", version)
	default:
		c.Known, c.OK, c.Detail = true, cmp >= 0, "redis "+version
	}
	return c
}

// ServerFacts are what `starter setup` reads of the Temporal server and
// namespace (ReadServer); Checks judges them. An error field is set when
// that fact could not be read.
type ServerFacts struct {
	Version    string // GetSystemInfo's server version; "" when not reported
	VersionErr error
	// Namespace capabilities (DescribeNamespace), which reflect the
	// dynamic config: Workflow Update (frontend.enableUpdateWorkflowExecution)
	// and eager workflow start (system.enableEagerWorkflowStart).
	SyncUpdate, EagerStart bool
	NamespaceErr           error
	// Probed: a workflow started with a static summary has it back in its
	// description; DescribeTaskQueue reports backlog stats (what KEDA's
	// temporal trigger reads); the queue dispatches by fairness key.
	UserMetadata    bool
	UserMetadataErr error
	BacklogStats    bool
	BacklogErr      error
	Fairness        bool
	FairnessErr     error
}

// Check is one line of setup's report.
type Check struct {
	What string // the feature
	OK   bool
	// Known is false when it could not be read (Detail says why); the
	// line then says so instead of ok or missing.
	Known bool
	// Required: without it part of fanout fails, not only runs slower or
	// less fairly.
	Required bool
	Detail   string // what was found
	Fix      string // what turns it on, when missing
}

// Checks judges facts against what fanout relies on, in a fixed order.
func Checks(f ServerFacts) []Check {
	var cs []Check
	v := Check{What: "Temporal server " + MinTemporalServer + " or later", Required: true, Fix: "upgrade the Temporal server to " + MinTemporalServer + " or later"}
	switch cmp, ok := compareVersions(f.Version, MinTemporalServer); {
	case f.VersionErr != nil:
		v.Detail = "cannot read the server's version: " + f.VersionErr.Error()
	case !ok:
		v.Detail = fmt.Sprintf("the server reports version %q, which is not major.minor.patch", f.Version)
	default:
		v.Known, v.OK, v.Detail = true, cmp >= 0, "server "+f.Version
	}
	cs = append(cs, v)
	ns := func(c Check, on bool) Check {
		if f.NamespaceErr != nil {
			c.Detail = "cannot describe the namespace: " + f.NamespaceErr.Error()
		} else {
			c.Known, c.OK = true, on
		}
		return c
	}
	cs = append(cs,
		ns(Check{What: "Workflow Update (the pause, resume, set-rate and reschedule updates)", Required: true,
			Fix: "dynamic config frontend.enableUpdateWorkflowExecution=true"}, f.SyncUpdate),
		ns(Check{What: "eager workflow start (the bridge inside the events worker, FANOUT_BRIDGE=true)",
			Fix: "dynamic config system.enableEagerWorkflowStart=true (without it each start goes through matching: slower, still correct)"}, f.EagerStart),
		probed(Check{What: "user metadata (each event's summary and current details in the UI and CLI)",
			Fix: "a server 1.25 or later (no dynamic config switches it)"}, f.UserMetadata, f.UserMetadataErr),
		probed(Check{What: "task-queue backlog stats (KEDA's temporal trigger scales the workers on them)",
			Fix: "a server 1.25 or later; without them KEDA cannot scale the pools (size them by hand)"}, f.BacklogStats, f.BacklogErr),
		probed(Check{What: "task-queue fairness (events of one priority take turns on its queues)",
			Fix: "self-hosted: dynamic config matching.enableFairness=true; Temporal Cloud: the namespace's fairness setting (docs/deploy.md, Fairness); " +
				"without it a small event waits behind the batches big events of its priority queued first"}, f.Fairness, f.FairnessErr),
	)
	return cs
}

func probed(c Check, on bool, err error) Check {
	if err != nil {
		c.Detail = "could not tell: " + err.Error()
		return c
	}
	c.Known, c.OK = true, on
	return c
}

// Missing are the required checks that are known to fail.
func Missing(cs []Check) []Check {
	var out []Check
	for _, c := range cs {
		if c.Required && c.Known && !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// String is the check as setup prints it: ok, MISSING (with the fix) or
// unknown (with the reason).
func (c Check) String() string {
	switch {
	case !c.Known:
		return fmt.Sprintf("unknown  %s: %s", c.What, c.Detail)
	case c.OK && c.Detail != "":
		return fmt.Sprintf("ok       %s (%s)", c.What, c.Detail)
	case c.OK:
		return "ok       " + c.What
	case c.Detail != "":
		return fmt.Sprintf("MISSING  %s (%s): %s", c.What, c.Detail, c.Fix)
	}
	return fmt.Sprintf("MISSING  %s: %s", c.What, c.Fix)
}

var versionRE = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)`)

// compareVersions compares the major.minor.patch of a and b (anything after
// the patch, such as a pre-release or build suffix, is ignored); ok is false
// when either is not one.
func compareVersions(a, b string) (cmp int, ok bool) {
	ma, mb := versionRE.FindStringSubmatch(a), versionRE.FindStringSubmatch(b)
	if ma == nil || mb == nil {
		return 0, false
	}
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(ma[i])
		y, _ := strconv.Atoi(mb[i])
		if x != y {
			if x < y {
				return -1, true
			}
			return 1, true
		}
	}
	return 0, true
}

// ReadServer reads the facts Checks judges from the server and namespace:
// GetSystemInfo, DescribeNamespace, and three probes on task queues of
// their own that no worker polls (probeMetadataAndBacklog, ProbeFairness),
// whose workflows are terminated before it returns.
func ReadServer(ctx context.Context, tc client.Client, namespace string) ServerFacts {
	var f ServerFacts
	if si, err := tc.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{}); err != nil {
		f.VersionErr = err
	} else {
		f.Version = si.GetServerVersion()
	}
	if d, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace}); err != nil {
		f.NamespaceErr = err
	} else {
		caps := d.GetNamespaceInfo().GetCapabilities()
		f.SyncUpdate, f.EagerStart = caps.GetSyncUpdate(), caps.GetEagerWorkflowStart()
	}
	probeMetadataAndBacklog(ctx, tc, namespace, &f)
	f.Fairness, f.FairnessErr = ProbeFairness(ctx, tc, namespace)
	return f
}

// MetadataProbeWorkflow is the type of probeMetadataAndBacklog's workflow:
// no worker registers it.
const MetadataProbeWorkflow = "fanout-metadata-probe"

// probeMetadataAndBacklog starts one workflow with a static summary on a
// task queue of its own that no worker polls and reports whether its
// description has the summary back (user metadata: a server that does not
// know the field drops it) and whether DescribeTaskQueue with ReportStats
// (the call KEDA's temporal trigger makes for an unversioned queue) reports
// stats for the queue's workflow tasks, into f. The workflow is terminated before it returns.
func probeMetadataAndBacklog(ctx context.Context, tc client.Client, namespace string, f *ServerFacts) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tq := "fanout-metadata-probe-" + hex.EncodeToString(rnd[:])
	const summary = "fanout setup: user metadata probe"
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: tq, TaskQueue: tq, WorkflowExecutionTimeout: time.Minute, StaticSummary: summary,
	}, MetadataProbeWorkflow)
	if err != nil {
		f.UserMetadataErr = fmt.Errorf("metadata probe: start: %w", err)
		f.BacklogErr = f.UserMetadataErr
		return
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tc.TerminateWorkflow(tctx, run.GetID(), run.GetRunID(), "fanout setup: probe done")
	}()
	if d, err := tc.DescribeWorkflow(ctx, run.GetID(), run.GetRunID()); err != nil {
		f.UserMetadataErr = fmt.Errorf("metadata probe: describe: %w", err)
	} else if got, err := d.GetStaticSummary(); err != nil {
		f.UserMetadataErr = fmt.Errorf("metadata probe: read the summary: %w", err)
	} else {
		f.UserMetadata = got == summary
	}
	// The workflow's first task waits on the queue: its stats are there to
	// report, on a server that reports them.
	desc, err := tc.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace:     namespace,
		TaskQueue:     &taskqueuepb.TaskQueue{Name: tq, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
		TaskQueueType: enumspb.TASK_QUEUE_TYPE_WORKFLOW,
		ReportStats:   true,
	})
	if err != nil {
		f.BacklogErr = fmt.Errorf("backlog probe: describe task queue: %w", err)
		return
	}
	f.BacklogStats = desc.GetStats() != nil
}
