package cli

import (
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
)

// HostileFlags are the core-banking simulator's real-bank misbehaviours, shared by
// corebank and demo.
type HostileFlags struct {
	inProgress409  bool
	slowRate       float64
	slowLatency    time.Duration
	badGatewayRate float64
	resetRate      float64
	outage         string
	outageHealthy  bool
	pendingRate    float64
	pendingLatency time.Duration
}

// Bind registers the flags; envPrefix names their variables ("" for none).
func (h *HostileFlags) Bind(f *FlagSet, envPrefix string) {
	env := func(name string) string {
		if envPrefix == "" {
			return ""
		}
		return envPrefix + name
	}
	f.Bool(&h.inProgress409, "in-progress-409", env("IN_PROGRESS_409"), false, "answer 409 REQUEST_IN_PROGRESS while an earlier request with the same key is still being processed")
	f.Float(&h.slowRate, "slow-rate", env("SLOW_RATE"), 0, "chance (0-1) that a post takes --slow-latency and posts even after the caller gave up")
	f.Duration(&h.slowLatency, "slow-latency", env("SLOW_LATENCY"), 3*time.Second, "how long a slow post takes")
	f.Float(&h.badGatewayRate, "bad-gateway-rate", env("BAD_GATEWAY_RATE"), 0, "chance (0-1) of posting and then answering 502")
	f.Float(&h.resetRate, "reset-rate", env("RESET_RATE"), 0, "chance (0-1) of posting and then dropping the connection")
	f.String(&h.outage, "outage", env("OUTAGE"), "", "an outage window from start: STATUS:DURATION, e.g. 503:60s or 401:10s (every call and /healthz answer STATUS)")
	f.Bool(&h.outageHealthy, "outage-healthy", env("OUTAGE_HEALTHY"), false, "/healthz keeps answering 200 through the --outage window (a health check that lies)")
	f.Float(&h.pendingRate, "pending-rate", env("PENDING_RATE"), 0, "chance (0-1) that a debit is answered 202 PENDING and posts --pending-latency later")
	f.Duration(&h.pendingLatency, "pending-latency", env("PENDING_LATENCY"), 2*time.Second, "how long a PENDING debit takes to post")
}

// Apply checks the flags and sets them on faults.
func (h *HostileFlags) Apply(p *Problems, faults *corebanksim.FaultsBody) {
	for _, r := range []float64{h.slowRate, h.badGatewayRate, h.resetRate, h.pendingRate} {
		if r < 0 || r > 1 {
			p.Add("fault rates must be within 0-1")
			break
		}
	}
	if h.slowLatency < 0 || h.pendingLatency < 0 {
		p.Add("--slow-latency and --pending-latency must not be negative")
	}
	faults.OutageHealthy = h.outageHealthy
	faults.PendingRate, faults.PendingMS = h.pendingRate, h.pendingLatency.Milliseconds()
	faults.InProgress409 = h.inProgress409
	faults.SlowRate, faults.SlowMS = h.slowRate, h.slowLatency.Milliseconds()
	faults.BadGatewayAfterPostRate, faults.ResetAfterPostRate = h.badGatewayRate, h.resetRate
	if h.outage != "" {
		st, d, ok := strings.Cut(h.outage, ":")
		status, err1 := strconv.Atoi(st)
		dur, err2 := time.ParseDuration(d)
		if !ok || err1 != nil || err2 != nil || status < 300 || status > 599 || dur <= 0 {
			p.Add("--outage %q: want STATUS:DURATION, e.g. 503:60s", h.outage)
			return
		}
		faults.OutageStatus, faults.OutageMS = status, dur.Milliseconds()
	}
}
