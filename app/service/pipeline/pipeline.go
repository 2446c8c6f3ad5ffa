// Package pipeline wires the consumer service — runtime, charge handler,
// guard, bank client with its circuit breaker, metrics — from one
// configuration. serve, the demo, the bench and the process tests all use
// New, so that what is measured and tested is what runs.
package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/internal/redact"
	"github.com/finedge/idempotent-consumer/internal/secretfile"

	"go.opentelemetry.io/otel/trace"

	"github.com/finedge/idempotent-consumer/app/calendar"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/clientauth"
	"github.com/finedge/idempotent-consumer/app/corebank"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/tracing"
	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Config is the processing configuration of serve, the demo and the bench.
type Config struct {
	Concurrency     int
	Visibility      time.Duration
	Lease           time.Duration
	Retention       time.Duration
	Skew            time.Duration
	ShutdownTimeout time.Duration
	CorebankURL     string
	CorebankTimeout time.Duration
	Declines        string
	Posted, Pending string
	Enquiry         bool
	HealthPath      string
	CircuitAfter    int
	StoreAfter      int
	ProbeEvery      time.Duration
	ProbeMax        time.Duration
	NotifyTimeout   time.Duration
	NotifyFailRate  float64
	// Colocate says whether claims ride in the queue's transactions where
	// the queue and the store share a database: "auto" (the default: yes,
	// where they do) or "off" (the separate store calls, everywhere).
	Colocate string
	// Receivers is how many receives may be under way at once (0: the
	// default, 1, or 4 where claims ride in the queue's transactions:
	// each such receive waits for a commit).
	Receivers int
	// BankAuth: how to authenticate to core banking (files only).
	BankAuth AuthFlags
	// FingerprintKeyFile holds the key the fingerprints are written under;
	// FingerprintPreviousKeyFiles (comma-separated) keys recognised while
	// records written under them live (see idempotency.Fingerprinter).
	FingerprintKeyFile, FingerprintPreviousKeyFiles string
	// Fingerprints, when set, is used instead of the key files (demo,
	// bench). With neither, fingerprints are unkeyed (tests only).
	Fingerprints *idempotency.Fingerprinter
	// The recovery policy (docs/operations/recovery-policy.md).
	// RetryDeclines is the retry schedule by decline code
	// (INSUFFICIENT_FUNDS=24h×3,…; "" retries nothing), capped at
	// RetryMaxAttempts debit attempts per charge within RetryWindow of
	// the first (0: the defaults, 4 and 30 days).
	RetryDeclines    string
	RetryMaxAttempts int
	RetryWindow      time.Duration
	// NoticeLead, when set, is notice-first mode: the advance notice goes
	// out on a charge's first delivery and the debit waits this long.
	NoticeLead time.Duration
	// PostingWindows, when set, are the bank's processing windows
	// ("Mon-Fri 06:00-20:00 Asia/Kolkata; …"): outside them nothing is
	// received, so no debit is posted and no message's receive count
	// grows. HolidaysFile closes them on its dates.
	PostingWindows, HolidaysFile string
}

// Calendar is the posting calendar the flags give (nil: always open).
func (c *Config) Calendar() (*calendar.Calendar, error) {
	if c.PostingWindows == "" {
		if c.HolidaysFile != "" {
			return nil, errors.New("--holidays closes the posting windows on its dates: give --posting-windows too")
		}
		return nil, nil
	}
	var h calendar.Holidays
	if c.HolidaysFile != "" {
		var err error
		if h, err = calendar.ReadHolidays(c.HolidaysFile); err != nil {
			return nil, fmt.Errorf("--holidays: %w", err)
		}
	}
	cal, err := calendar.Parse(c.PostingWindows, h)
	if err != nil {
		return nil, fmt.Errorf("--posting-windows: %w", err)
	}
	return cal, nil
}

// GuardSkew is a --skew-margin flag's value as idempotency.Options takes
// it: the flag's 0 (no margin) is the guard's -1, since a zero there means
// the default.
func GuardSkew(skew time.Duration) time.Duration {
	if skew == 0 {
		return -1
	}
	return skew
}

// CheckWindowRetention refuses posting windows that stay closed, within
// the calendar's horizon from now, longer than a message lasts on the
// queue (retention, less the 12 hours a waiting charge's message may have
// been on it when its wait ends): the calendar's gate receives nothing
// while closed, so what arrives as a window closes would expire on the
// queue, never received, before the next one opens. A calendar that never
// opens again is refused too.
func CheckWindowRetention(cal *calendar.Calendar, retention time.Duration, now time.Time) error {
	if cal == nil {
		return nil
	}
	start, end, closes, err := cal.LongestClosure(now, calendar.Horizon)
	switch {
	case err != nil:
		return cli.Usagef("--posting-windows / --holidays: closed from %s with no window opening within %d days: every charge would expire on the queue", start.UTC().Format(time.RFC3339), calendar.Horizon)
	case !closes:
		return nil
	}
	if closed := end.Sub(start); closed+queue.MaxVisibility > retention {
		// In the bank's own time, with the weekday: what an operator
		// checks against the calendar.
		const layout = "Mon 2006-01-02 15:04 MST"
		loc := cal.Windows()[0].Loc
		return cli.Usagef("--posting-windows / --holidays: closed for %s (from %s to %s), and a message lasts %s on the queue: what arrives as the window closes (or a waiting charge's message, up to 12 hours old when its wait ends) would expire before the next window opens, never received; raise the queue's message retention (embedded, postgres: --queue-retention; aws: the queue's MessageRetentionPeriod) to at least %s, or open a window within the closure",
			closed.Round(time.Minute), start.In(loc).Format(layout), end.In(loc).Format(layout), retention, closed+queue.MaxVisibility)
	}
	return nil
}

// RetryPolicy is the retry schedule the flags give (nil: none).
func (c *Config) RetryPolicy() (*charge.RetryPolicy, error) {
	rules, err := charge.ParseRetryRules(c.RetryDeclines)
	if err != nil || len(rules) == 0 {
		return nil, err
	}
	p := &charge.RetryPolicy{Rules: rules, MaxAttempts: c.RetryMaxAttempts, Window: c.RetryWindow}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// RunKeys is a Fingerprinter with a random key of a run's own (demo,
// bench: their records do not outlive them).
func RunKeys() *idempotency.Fingerprinter {
	f, err := idempotency.NewFingerprinter([]byte(rand.Text() + rand.Text()))
	if err != nil {
		panic(err) // 52 bytes are enough
	}
	return f
}

// Keys returns the Fingerprinter: Fingerprints, or the key files read
// (nil without either).
func (c *Config) Keys() (*idempotency.Fingerprinter, error) {
	if c.Fingerprints != nil || c.FingerprintKeyFile == "" {
		return c.Fingerprints, nil
	}
	read := func(flag, file string) ([]byte, error) {
		b, err := secretfile.Read(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		k := bytes.TrimSpace(b)
		if len(k) < idempotency.MinFingerprintKey {
			return nil, fmt.Errorf("%s: %s holds %d bytes, want at least %d (make one with: openssl rand -base64 48 > %s; chmod 600 %s)",
				flag, file, len(k), idempotency.MinFingerprintKey, file, file)
		}
		return k, nil
	}
	cur, err := read("--fingerprint-key-file", c.FingerprintKeyFile)
	if err != nil {
		return nil, err
	}
	var prev [][]byte
	for _, file := range strings.Split(c.FingerprintPreviousKeyFiles, ",") {
		if file = strings.TrimSpace(file); file == "" {
			continue
		}
		k, err := read("--fingerprint-previous-key-files", file)
		if err != nil {
			return nil, err
		}
		prev = append(prev, k)
	}
	return idempotency.NewFingerprinter(cur, prev...)
}

// AuthFlags are the authentication files and OAuth2 settings of one HTTP
// API (clientauth.Options), bound with a flag prefix.
type AuthFlags struct {
	CA, Cert, Key, HeaderFile      string
	TokenURL, ClientID, SecretFile string
	Scopes                         string
}

// Bind registers --PREFIX-ca, --PREFIX-client-cert, … with IC_ENV_* variables.
func (a *AuthFlags) Bind(f *cli.FlagSet, prefix, env, what string) {
	f.String(&a.CA, prefix+"-ca", env+"_CA", "", what+": PEM bundle of the CAs that sign its server certificate (instead of the system roots); read again when it changes")
	f.String(&a.Cert, prefix+"-client-cert", env+"_CLIENT_CERT", "", what+": client certificate (PEM) for mutual TLS; read again when it changes (rotation without a restart)")
	f.String(&a.Key, prefix+"-client-key", env+"_CLIENT_KEY", "", what+": the client certificate's key (PEM)")
	f.String(&a.HeaderFile, prefix+"-header-file", env+"_HEADER_FILE", "", what+": file of \"Name: value\" lines added to every request (an API key)")
	f.String(&a.TokenURL, prefix+"-oauth-token-url", env+"_OAUTH_TOKEN_URL", "", what+": OAuth2 token endpoint (client credentials grant)")
	f.String(&a.ClientID, prefix+"-oauth-client-id", env+"_OAUTH_CLIENT_ID", "", what+": OAuth2 client id")
	f.String(&a.SecretFile, prefix+"-oauth-client-secret-file", env+"_OAUTH_CLIENT_SECRET_FILE", "", what+": file holding the OAuth2 client secret (never a flag value); read again when it changes")
	f.String(&a.Scopes, prefix+"-oauth-scopes", env+"_OAUTH_SCOPES", "", what+": OAuth2 scopes, comma-separated")
}

// Auth builds the clientauth.Auth (nil when nothing is configured).
func (a AuthFlags) Auth() (*clientauth.Auth, error) {
	if a == (AuthFlags{}) {
		return nil, nil
	}
	var scopes []string
	for _, s := range strings.Split(a.Scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			scopes = append(scopes, s)
		}
	}
	return clientauth.New(clientauth.Options{CAFile: a.CA, CertFile: a.Cert, KeyFile: a.Key, HeaderFile: a.HeaderFile,
		TokenURL: a.TokenURL, ClientID: a.ClientID, ClientSecretFile: a.SecretFile, Scopes: scopes})
}

// Bind registers the processing flags.
func (c *Config) Bind(f *cli.FlagSet) {
	f.Int(&c.Concurrency, "concurrency", "IC_CONCURRENCY", 16, "messages handled at once")
	f.Duration(&c.Visibility, "visibility", "IC_VISIBILITY", 30*time.Second, "the queue's visibility timeout; the heartbeat extends in-flight messages by this every visibility/3")
	f.Duration(&c.Lease, "lease", "IC_LEASE", 60*time.Second, "claim lease; a crashed worker's charge is reclaimed after this (at least --visibility)")
	f.Duration(&c.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long idempotency records are kept (longer than queue retention + DLQ redrive window)")
	f.Duration(&c.Skew, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "a lease is reclaimable only this long after it ends: the largest clock difference between consumer hosts tolerated (keep hosts on NTP)")
	f.Duration(&c.ShutdownTimeout, "shutdown-timeout", "IC_SHUTDOWN_TIMEOUT", 30*time.Second, "how long in-flight charges may finish after SIGTERM")
	f.String(&c.CorebankURL, "corebank-url", "IC_COREBANK_URL", "", "core-banking debit API base URL, e.g. http://127.0.0.1:8081 (required)")
	f.Duration(&c.CorebankTimeout, "corebank-timeout", "IC_COREBANK_TIMEOUT", 10*time.Second, "timeout of one debit call (a timeout is retried with the same idempotency key)")
	f.String(&c.Declines, "corebank-declines", "IC_COREBANK_DECLINES", "422:DECLINED", "the bank's answers that mean a final decline, STATUS:ERROR,... (the body's \"error\" field); every other failure is retried with the same key")
	f.String(&c.Posted, "corebank-posted", "IC_COREBANK_POSTED", "POSTED", "the \"status\" words of a 2xx debit answer that mean posted (recorded DONE), comma-separated")
	f.String(&c.Pending, "corebank-pending", "IC_COREBANK_PENDING", "PENDING,ACCEPTED", "the \"status\" words of a 2xx debit answer that mean accepted, not yet posted: the claim is kept and the status enquiry or a later attempt with the same key resolves it; any other 2xx is ambiguous and retried")
	f.Bool(&c.Enquiry, "corebank-enquiry", "IC_COREBANK_ENQUIRY", false, "ask GET /v1/debits/{key} before posting a reclaimed charge again (only if the bank offers the status enquiry)")
	f.String(&c.HealthPath, "corebank-health-path", "IC_COREBANK_HEALTH_PATH", "/healthz", "what the circuit breaker probes while the bank is down before it lets one trial call through (\"\": no health check, the trial call is the probe); a health check is a hint, never proof")
	f.Int(&c.CircuitAfter, "circuit-failures", "IC_CIRCUIT_FAILURES", 5, "consecutive failed bank calls that open the circuit (stop receiving until a trial call succeeds)")
	f.Int(&c.StoreAfter, "store-circuit-failures", "IC_STORE_CIRCUIT_FAILURES", 5, "consecutive store calls that could not reach the idempotency store before receiving pauses (until a trial message's store call succeeds)")
	f.Duration(&c.ProbeEvery, "circuit-probe", "IC_CIRCUIT_PROBE", 5*time.Second, "first wait before a trial while a circuit is open (doubles per failed probe or trial, back to this once it closes)")
	f.Duration(&c.ProbeMax, "circuit-probe-max", "IC_CIRCUIT_PROBE_MAX", 60*time.Second, "longest wait between probes")
	f.Duration(&c.NotifyTimeout, "notify-timeout", "IC_NOTIFY_TIMEOUT", 5*time.Second, "how long the pre-debit notification may take; past it the charge is DEBITED_NOTIFICATION_FAILED (never re-debited)")
	f.String(&c.RetryDeclines, "retry-declines", "IC_RETRY_DECLINES", "", "retry schedule of declined debits by the bank's decline code, CODE=DELAY×N,... (e.g. INSUFFICIENT_FUNDS=24h×3,ACCOUNT_FROZEN=72h×1; x for ×, 3d for days): each retry under the next bank-key generation, DELAY after the decline plus up to 10% jitter; a code not listed is final, hard declines (ACCOUNT_CLOSED…) are never retried; off by default")
	f.Int(&c.RetryMaxAttempts, "retry-max-attempts", "IC_RETRY_MAX_ATTEMPTS", 0, "with --retry-declines: the most debit attempts of one charge, across every code, the first included, 2-100 (0: 4)")
	f.Duration(&c.RetryWindow, "retry-window", "IC_RETRY_WINDOW", 0, "with --retry-declines: no retry is scheduled later than this after the first decline (0: 720h, 30 days)")
	f.Duration(&c.NoticeLead, "notice-lead", "IC_NOTICE_LEAD", 0, "notice first: send the advance notice (\"₹25.00 will be debited on or after T\") on a charge's first delivery and debit only this long after it (e.g. 24h); no notice sent, no debit; 0: off (the notification follows the debit)")
	f.String(&c.PostingWindows, "posting-windows", "IC_POSTING_WINDOWS", "", "the bank's posting windows, DAYS HH:MM-HH:MM ZONE; ... (e.g. \"Mon-Fri 06:00-20:00 Asia/Kolkata; Sat 06:00-13:00 Asia/Kolkata\"): outside them nothing is received, so no debit is posted and no receive count grows; charges resume in order when a window opens; always open by default")
	f.String(&c.HolidaysFile, "holidays", "IC_HOLIDAYS", "", "file of bank holidays, one YYYY-MM-DD a line with an optional name (# comments): no posting window opens on them (needs --posting-windows)")
	c.BankAuth.Bind(f, "corebank", "IC_COREBANK", "core banking")
	c.BindKeys(f, true)
	f.String(&c.Colocate, "colocate", "IC_COLOCATE", "auto", "where the queue and the idempotency store share one database (embedded, postgres): auto writes each claim in the transaction that receives its message and each result in the one that deletes or dead-letters it; off makes them store calls of their own (as with DynamoDB or Redis)")
	f.Int(&c.Receivers, "receivers", "IC_RECEIVERS", 0, "receives under way at once, sharing --concurrency (0: 1, or 4 where claims ride in the queue's transactions, whose receives each wait for a commit)")
	f.Float(&c.NotifyFailRate, "notify-fail-rate", "IC_NOTIFY_FAIL_RATE", 0, "--notify sim only: the simulator's notification failure rate, 0-1")
}

// BindKeys binds the fingerprint key flags alone: serve's (required), and
// those of the commands that check a posting against its record's
// fingerprint (optional there: the amount is compared with the record's
// summary either way).
func (c *Config) BindKeys(f *cli.FlagSet, required bool) {
	use := "file holding the secret key of the charges' fingerprints (required; at least 32 bytes, e.g. openssl rand -base64 48): a fingerprint in the store then reveals nothing of the account number"
	if !required {
		use = "file holding serve's fingerprint key (optional: without it a posting's narrative is not checked against its record's keyed fingerprint; its amount, currency and account are compared with the record's summary either way)"
	}
	f.String(&c.FingerprintKeyFile, "fingerprint-key-file", "IC_FINGERPRINT_KEY_FILE", "", use)
	f.String(&c.FingerprintPreviousKeyFiles, "fingerprint-previous-key-files", "IC_FINGERPRINT_PREVIOUS_KEY_FILES", "", "comma-separated files of earlier fingerprint keys, still recognised for records written under them (key rotation: see docs/operations/security.md)")
}

// Check reports what is wrong with c; needCorebank when a bank URL is required.
func (c *Config) Check(p *cli.Problems, needCorebank bool) {
	if c.Concurrency < 1 || c.Concurrency > 1000 {
		p.Add("--concurrency %d is outside 1-1000", c.Concurrency)
	}
	if c.Visibility < 3*time.Second || c.Visibility > queue.MaxVisibility {
		p.Add("--visibility %s is outside 3s-12h", c.Visibility)
	}
	if c.Lease < c.Visibility {
		p.Add("--lease %s must be at least --visibility %s, so that the heartbeat keeps the claim alive", c.Lease, c.Visibility)
	}
	if c.Retention < 24*time.Hour {
		p.Add("--retention %s is under 24h: a redelivery could then debit again; keep it longer than the queue's retention plus the DLQ redrive window", c.Retention)
	}
	if c.ShutdownTimeout <= 0 {
		p.Add("--shutdown-timeout must be positive")
	}
	if c.Skew < 0 || c.Skew >= c.Lease {
		p.Add("--skew-margin %s must be at least 0 and shorter than --lease %s", c.Skew, c.Lease)
	}
	if needCorebank && c.CorebankURL == "" {
		p.Add("--corebank-url (IC_COREBANK_URL) is required: the core-banking debit API, or the simulator (chargerecovery corebank --addr 127.0.0.1:8081)")
	}
	if c.CorebankTimeout <= 0 {
		p.Add("--corebank-timeout must be positive")
	}
	if _, err := corebank.ParseDeclineRules(c.Declines); err != nil {
		p.Add("--corebank-declines: %v", err)
	}
	posted, err := corebank.ParseWords(c.Posted)
	if err != nil {
		p.Add("--corebank-posted: %v", err)
	}
	pending, err := corebank.ParseWords(c.Pending)
	if err != nil {
		p.Add("--corebank-pending: %v", err)
	}
	for _, w := range posted {
		if slices.Contains(pending, w) {
			p.Add("--corebank-posted and --corebank-pending both name %s: a word means posted or pending, not both", w)
		}
	}
	if c.HealthPath != "" && !strings.HasPrefix(c.HealthPath, "/") {
		p.Add("--corebank-health-path %q must start with / (or be empty: no health check, the trial call is the probe)", c.HealthPath)
	}
	if c.CircuitAfter < 1 || c.CircuitAfter > 1000 {
		p.Add("--circuit-failures %d is outside 1-1000", c.CircuitAfter)
	}
	if c.StoreAfter < 1 || c.StoreAfter > 1000 {
		p.Add("--store-circuit-failures %d is outside 1-1000", c.StoreAfter)
	}
	if c.ProbeEvery <= 0 || c.ProbeMax < c.ProbeEvery {
		p.Add("--circuit-probe must be positive and --circuit-probe-max at least --circuit-probe")
	}
	if c.NotifyTimeout <= 0 {
		p.Add("--notify-timeout must be positive")
	}
	if auth, err := c.BankAuth.Auth(); err != nil {
		p.Add("core-banking authentication: %v", err)
	} else if err := auth.CheckURL("--corebank-url", c.CorebankURL); err != nil && c.CorebankURL != "" {
		p.Add("%v", err)
	}
	if needCorebank && c.FingerprintKeyFile == "" && c.Fingerprints == nil {
		p.Add("--fingerprint-key-file (IC_FINGERPRINT_KEY_FILE) is required: the secret key of the charges' fingerprints; make one with: openssl rand -base64 48 > fingerprint.key; chmod 600 fingerprint.key (every consumer of a queue uses the same key)")
	} else if _, err := c.Keys(); err != nil {
		p.Add("%v", err)
	}
	if c.Receivers < 0 || c.Receivers > 16 {
		p.Add("--receivers %d is outside 0-16", c.Receivers)
	}
	if c.Colocate != "" && c.Colocate != "auto" && c.Colocate != "off" {
		p.Add("--colocate %q is not auto or off", c.Colocate)
	}
	if c.NotifyFailRate < 0 || c.NotifyFailRate > 1 {
		p.Add("--notify-fail-rate %v is outside 0-1", c.NotifyFailRate)
	}
	if _, err := c.RetryPolicy(); err != nil {
		p.Add("--retry-declines: %v", err)
	}
	if c.RetryDeclines == "" && (c.RetryMaxAttempts != 0 || c.RetryWindow != 0) {
		p.Add("--retry-max-attempts and --retry-window cap the retry schedule: give --retry-declines too (or drop them)")
	}
	if c.NoticeLead < 0 || c.NoticeLead > 60*24*time.Hour {
		p.Add("--notice-lead %s is outside 0-1440h (60 days)", c.NoticeLead)
	}
	if cal, err := c.Calendar(); err != nil {
		p.Add("%v", err)
	} else if cal != nil {
		if _, err := cal.NextOpen(time.Now()); err != nil {
			p.Add("--posting-windows %q: no posting window opens within %d days (--holidays lists every day they open on?): nothing would ever be debited", c.PostingWindows, calendar.Horizon)
		}
	}
	if c.NoticeLead > 0 && c.NoticeLead+time.Hour > c.Retention {
		p.Add("--notice-lead %s must be shorter than --retention %s by an hour at least: a waiting charge's record must outlive its wait", c.NoticeLead, c.Retention)
	}
}

// Bank is the core-banking adapters of a pipeline.
type Bank struct {
	Debiter  charge.Debiter
	Enquirer charge.Enquirer  // nil: no status enquiry
	Breaker  *circuit.Breaker // nil: no circuit breaker
	Client   *corebank.Client // the HTTP adapter (ledger reads in the demo)
	// Auth is how the client authenticates (nil: not at all).
	Auth *clientauth.Auth
}

// NewBank builds the HTTP client with its circuit breaker for c. The flags
// were checked by Config.Check.
func NewBank(c Config, log *slog.Logger) (Bank, error) {
	declines, err := corebank.ParseDeclineRules(c.Declines)
	if err != nil {
		return Bank{}, cli.Usagef("--corebank-declines: %v", err)
	}
	var client *corebank.Client
	var probe func(context.Context) error
	if c.HealthPath != "" {
		probe = func(ctx context.Context) error { return client.Probe(ctx) }
	}
	breaker, err := circuit.New(circuit.Options{
		Name: "core banking " + redact.URL(c.CorebankURL), Threshold: c.CircuitAfter, ProbeInterval: c.ProbeEvery,
		MaxProbeInterval: c.ProbeMax, ProbeTimeout: c.CorebankTimeout, Logger: log, Probe: probe, Summarize: BankCause,
	})
	if err != nil {
		return Bank{}, cli.Usagef("%v", err)
	}
	posted, err := corebank.ParseWords(cmp.Or(c.Posted, corebank.StatusPosted))
	if err != nil {
		return Bank{}, cli.Usagef("--corebank-posted: %v", err)
	}
	pending, err := corebank.ParseWords(cmp.Or(c.Pending, strings.Join(corebank.DefaultPending, ",")))
	if err != nil {
		return Bank{}, cli.Usagef("--corebank-pending: %v", err)
	}
	auth, err := c.BankAuth.Auth()
	if err != nil {
		return Bank{}, cli.Usagef("core-banking authentication: %v", err)
	}
	if err := auth.CheckURL("--corebank-url", c.CorebankURL); err != nil {
		return Bank{}, cli.Usagef("%v", err)
	}
	opts := corebank.ClientOptions{
		Timeout: c.CorebankTimeout, Declines: declines, Breaker: breaker, HealthPath: cmp.Or(c.HealthPath, "/healthz"),
		Posted: posted, Pending: pending, Headers: tracing.Headers, Explain: clientauth.Explain}
	if auth != nil {
		opts.HTTPClient = auth.Client()
	}
	client, err = corebank.NewClient(c.CorebankURL, opts)
	if err != nil {
		return Bank{}, cli.Usagef("--corebank-url: %v", err)
	}
	b := Bank{Debiter: client, Breaker: breaker, Client: client, Auth: auth}
	if c.Enquiry {
		b.Enquirer = client
	}
	return b, nil
}

// Ports are what a pipeline consumes and calls.
type Ports struct {
	Source   consumer.Source
	Store    driver.Store
	Bank     Bank
	Notifier charge.Notifier
}

// Options are the parts of a pipeline that are not configuration.
type Options struct {
	// Logger gets the service's and the runtime's lines. Required.
	Logger *slog.Logger
	// Metrics, when set, instruments every port and the runtime.
	Metrics *metrics.Metrics
	// OnResult and OnDecision, when set, see every result and decision
	// (the demo's and the bench's counters).
	OnResult   func(context.Context, queue.Message, charge.Charge, charge.Result)
	OnDecision func(queue.Message, consumer.Decision, time.Duration)
	// Tracer, when set, traces every message (see package tracing).
	Tracer trace.TracerProvider
	// NotifyChannel names the notification channel in metrics (sns,
	// webhook, log, sim).
	NotifyChannel string
	// AdvanceNotifier sends notice-first mode's advance notices (nil: the
	// Notifier, when it is one). Required with Config.NoticeLead.
	AdvanceNotifier charge.AdvanceNotifier
	// Baseline runs the same pipeline without the idempotency claim
	// (parse, debit, notify, ack): the bench's measure of what the guard
	// costs and prevents. Never in production.
	Baseline bool
}

// Pipeline is the consumer service wired over its ports: queue → runtime
// → charge handler → guard → bank.
type Pipeline struct {
	Guard   *idempotency.Guard // nil in baseline mode
	Runtime *consumer.Runtime
	breaker *circuit.Breaker
	auth    *clientauth.Auth
	// StoreGate pauses receiving while the idempotency store cannot be
	// reached (nil in baseline mode).
	StoreGate *circuit.Breaker
	// Window is the posting calendar's gate (nil: always open).
	Window *calendar.Gate
	// Colocated: claims are written in the queue's receive transactions
	// and results with the message's delete or dead-letter (the queue and
	// the store share a database, and Config.Colocate is not off).
	Colocated bool
}

// New wires the service over p as c configures.
func New(p Ports, c Config, o Options) (*Pipeline, error) {
	store, source, debiter, enquirer, notifier := p.Store, p.Source, p.Bank.Debiter, p.Bank.Enquirer, p.Notifier
	var tr *tracing.Tracing
	if o.Tracer != nil {
		tr = tracing.New(o.Tracer)
		store, debiter, notifier = tr.Store(store), tr.Debiter(debiter), tr.Notifier(notifier)
		if onResult := o.OnResult; onResult != nil {
			o.OnResult = func(ctx context.Context, m queue.Message, c charge.Charge, r charge.Result) {
				tracing.OnResult(ctx, m, c, r)
				onResult(ctx, m, c, r)
			}
		} else {
			o.OnResult = tracing.OnResult
		}
	}
	claiming, colocated := source.(queue.ClaimingReceiver)
	colocated = colocated && !o.Baseline && c.Colocate != "off" && claiming.Holds(p.Store)
	onDecision := o.OnDecision
	if m := o.Metrics; m != nil {
		store = m.Store(store)
		debiter, notifier = m.Debiter(debiter), m.Notifier(notifier, o.NotifyChannel)
		if enquirer != nil {
			enquirer = m.Enquirer(enquirer)
		}
		onDecision = func(msg queue.Message, d consumer.Decision, took time.Duration) {
			m.OnDecision(msg, d, took)
			if o.OnDecision != nil {
				o.OnDecision(msg, d, took)
			}
		}
		if p.Bank.Breaker != nil {
			m.Circuit(p.Bank.Breaker.Status)
		}
	}
	pl := &Pipeline{breaker: p.Bank.Breaker, auth: p.Bank.Auth}
	var h consumer.Handler
	if o.Baseline {
		h = baselineHandler(debiter, notifier)
	} else {
		after := c.StoreAfter
		if after == 0 {
			after = 5
		}
		probeEvery, probeMax := c.ProbeEvery, c.ProbeMax
		if probeEvery == 0 {
			probeEvery, probeMax = 5*time.Second, 60*time.Second
		}
		// No health check for the store: a read can answer while writes
		// fail (another process holds SQLite's write lock), so the trial
		// message's own store calls decide.
		sg, err := circuit.New(circuit.Options{Name: "idempotency store", Threshold: after,
			ProbeInterval: probeEvery, MaxProbeInterval: probeMax, Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		pl.StoreGate = sg
		store = gatedStore{Store: store, br: sg}
		if o.Metrics != nil {
			o.Metrics.StoreCircuit(sg.Status)
		}
		guard, err := idempotency.NewGuard(store, idempotency.Options{Lease: c.Lease, Retention: c.Retention, SkewMargin: GuardSkew(c.Skew)})
		if err != nil {
			return nil, err
		}
		keys, err := c.Keys()
		if err != nil {
			return nil, err
		}
		retry, err := c.RetryPolicy()
		if err != nil {
			return nil, cli.Usagef("--retry-declines: %v", err)
		}
		var advance charge.AdvanceNotifier
		if c.NoticeLead > 0 {
			// The advance notices go to the channel itself (the metrics and
			// tracing wrappers are of the other port), counted apart.
			advance = o.AdvanceNotifier
			if advance == nil {
				advance, _ = p.Notifier.(charge.AdvanceNotifier)
			}
			if advance == nil {
				return nil, cli.Usagef("--notice-lead: the notification channel cannot send advance notices")
			}
			if o.Metrics != nil {
				advance = o.Metrics.AdvanceNotifier(advance, o.NotifyChannel)
			}
		}
		svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: debiter, Notifier: notifier, Enquirer: enquirer,
			NotifyTimeout: c.NotifyTimeout, Logger: o.Logger, Fingerprints: keys, Retry: retry, NoticeLead: c.NoticeLead, AdvanceNotifier: advance})
		if err != nil {
			return nil, err
		}
		pl.Guard = guard
		ch := chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: o.Logger, OnResult: o.OnResult})
		h = ch
		if colocated {
			pl.Colocated = true
			// Every receive claims; each message's claim tells the store's
			// circuit (and the metrics) what its result's write did, as
			// gatedStore does for store calls.
			m := o.Metrics
			source = consumer.Claiming(source, claiming, ch.ClaimPolicy(), func(b driver.Bound) driver.Bound {
				if m != nil {
					b = m.Bound(b)
				}
				return gatedBound{Bound: b, br: sg}
			})
		}
	}
	if o.Metrics != nil {
		source = o.Metrics.Source(source)
	}
	if tr != nil {
		h = tr.Handler(h)
	}
	receivers := c.Receivers
	if receivers == 0 && pl.Colocated {
		receivers = ColocatedReceivers
	}
	opts := consumer.Options{
		Receivers:         receivers,
		Concurrency:       c.Concurrency,
		VisibilityTimeout: c.Visibility,
		ShutdownTimeout:   c.ShutdownTimeout,
		Logger:            o.Logger,
		OnDecision:        onDecision,
	}
	var gates []consumer.Gate
	if p.Bank.Breaker != nil {
		gates = append(gates, p.Bank.Breaker)
	}
	if pl.StoreGate != nil {
		gates = append(gates, pl.StoreGate)
	}
	cal, err := c.Calendar()
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	if cal != nil {
		pl.Window = calendar.NewGate(cal, nil)
		gates = append(gates, windowGate{pl.Window})
		if o.Metrics != nil {
			o.Metrics.PostingWindow(func() (bool, time.Time) {
				st := pl.Window.Status()
				return st.Open, st.Until
			})
		}
	}
	if len(gates) > 0 {
		opts.Gate = consumer.Gates(gates...)
	}
	rt, err := consumer.New(source, h, opts)
	if err != nil {
		return nil, err
	}
	if o.Metrics != nil {
		o.Metrics.RuntimeGauges(rt)
	}
	pl.Runtime = rt
	return pl, nil
}

// ColocatedReceivers is how many receives run at once by default where
// claims ride in the queue's transactions (each receive waits for its
// commit); elsewhere one.
const ColocatedReceivers = 4

// MostReceivers is the most receives c runs at once, whichever path it
// takes: what a backend's connection pool must be sized for.
func (c Config) MostReceivers() int {
	if c.Receivers > 0 {
		return c.Receivers
	}
	return ColocatedReceivers
}

// Run consumes until ctx ends, watching the bank's and the store's
// circuits while they are open.
func (p *Pipeline) Run(ctx context.Context) error {
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	for _, b := range []*circuit.Breaker{p.breaker, p.StoreGate} {
		if b != nil {
			go func() { _ = b.Run(pctx) }()
		}
	}
	return p.Runtime.Run(ctx)
}

// LogCalendar says at start what posting calendar the pipeline runs by
// and whether it is open now; it warns of a holidays file whose every date
// has passed (last year's, say: it closes nothing any more).
func (p *Pipeline) LogCalendar(log *slog.Logger, holidaysFile string, now time.Time) {
	if p.Window == nil {
		return
	}
	cal := p.Window.Calendar()
	h := cal.Holidays()
	log.Info("posting windows", "windows", cal.String(), "holidays", h.Len(), "now", p.Window.Status().String())
	if holidaysFile == "" {
		return
	}
	last, ok := h.Last()
	today := calendar.DateOf(now.In(cal.Windows()[0].Loc))
	switch {
	case !ok:
		log.Warn("--holidays lists no date: it closes no posting window", "holidays_file", holidaysFile)
	case last.String() < today.String(): // YYYY-MM-DD sorts as dates do
		log.Warn("--holidays lists no date from today on: it closes no posting window any more (last year's file?)",
			"holidays_file", holidaysFile, "last_holiday", last.String())
	}
}

// windowGate is the posting calendar as a consumer gate that receives
// nothing while the window is closed but never parks: a charge handed back
// then returns to the queue, to be received when the window opens (a
// weekend is longer than a message may be kept in hand).
type windowGate struct{ g *calendar.Gate }

var _ consumer.Shutter = windowGate{}

func (w windowGate) Wait(ctx context.Context) (bool, error) { return w.g.Wait(ctx) }
func (w windowGate) Paused() bool                           { return false }

// Shut is consumer.Shutter's: what a receive returns after the window
// closed is handed back, not debited after the cut-off.
func (w windowGate) Shut() bool { return w.g.Shut() }

// Idle is the answer of Ready for a service that works but posts no debit
// now: outside the posting window. /readyz answers 200 with Public.
type Idle struct{ Public string }

func (e *Idle) Error() string { return e.Public }

// NotReady is why the service is not ready. Public says it in words that
// may be shown to anyone (/readyz is unauthenticated): what is wrong,
// without the bank's text, addresses, URLs or file names; Err has the
// detail, for the log and status.
type NotReady struct {
	Public string
	Err    error
}

func (e *NotReady) Error() string { return e.Public + ": " + e.Err.Error() }
func (e *NotReady) Unwrap() error { return e.Err }

// Ready reports whether the service can do its work: the bank's
// credentials usable, neither circuit open, and the backend answering
// (backendReady). Every failure is a *NotReady.
func (p *Pipeline) Ready(backendReady func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if p.auth != nil {
			if err := p.auth.Check(); err != nil {
				public := "core-banking credentials cannot be used"
				var ce *clientauth.CheckError
				if errors.As(err, &ce) {
					public += ": " + ce.Summary
				}
				return &NotReady{Public: public, Err: fmt.Errorf("core-banking credentials: %w", err)}
			}
		}
		if p.breaker != nil {
			if s := p.breaker.Status(); s.State == circuit.Open {
				return &NotReady{
					Public: fmt.Sprintf("circuit open: core banking failing since %s (%d consecutive failures; %s); not receiving until a trial call succeeds",
						s.OpenedAt.UTC().Format(time.RFC3339), s.Failures, cmp.Or(s.LastCause, "see the log")),
					Err: fmt.Errorf("last failure: %s", s.LastError)}
			}
		}
		if p.StoreGate != nil {
			if s := p.StoreGate.Status(); s.State == circuit.Open {
				return &NotReady{
					Public: fmt.Sprintf("store circuit open: the idempotency store unreachable since %s (%d consecutive failures); not receiving until a trial message's store call succeeds",
						s.OpenedAt.UTC().Format(time.RFC3339), s.Failures),
					Err: fmt.Errorf("last failure: %s", s.LastError)}
			}
		}
		if err := backendReady(ctx); err != nil {
			return &NotReady{Public: "the queue or the idempotency store does not answer", Err: err}
		}
		if p.Window != nil {
			if st := p.Window.Status(); !st.Open {
				return &Idle{Public: st.String() + ": no debit is posted; charges wait on the queue, their receive counts untouched"}
			}
		}
		return nil
	}
}

// BankCause puts a failed bank call in words that may be shown to anyone:
// the authentication problem, or the kind of failure and its HTTP status;
// never the bank's text or address.
func BankCause(err error) string {
	if why := clientauth.Explain(err); why != "" {
		return why
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "no answer within the timeout"
	}
	var be *charge.BankError
	if errors.As(err, &be) {
		s := "core banking " + be.Kind.String()
		if be.Status != 0 {
			s += fmt.Sprintf(": HTTP %d", be.Status)
		}
		if be.NotSent {
			s += " (could not connect)"
		}
		return s
	}
	return "core banking failing"
}

// gatedStore tells the store's circuit every result: a store that could
// not be reached (idempotency.ErrUnavailable) is a failure; any answer,
// even a refusal (lease lost, not found), shows it works. Calls are never
// refused by it: a result after a debit must always be tried. Each call
// takes its ticket when it starts (the first call of a half-open circuit
// is its trial), so that a call started before the circuit opened never
// closes or reopens it, and a message that makes no store call takes no
// trial: the next one's call can be it.
type gatedStore struct {
	driver.Store
	br *circuit.Breaker
}

// call makes one store call under a ticket of the store's circuit.
func call[T any](ctx context.Context, br *circuit.Breaker, f func() (T, error)) (T, error) {
	tk, _ := br.Allow() // never refused: an open circuit only pauses receiving
	reported := false
	defer func() {
		if !reported { // f panicked: no verdict, and the trial is given back
			br.Abandon(tk)
		}
	}()
	v, err := f()
	reported = true
	switch {
	case err != nil && errors.Is(ctx.Err(), context.Canceled):
		// Our caller gave up (a store wraps its cancelled call as
		// ErrUnavailable too): no verdict on the store. A deadline that
		// passed is one: a store that does not answer in time is failing.
		br.Abandon(tk)
	case errors.Is(err, idempotency.ErrUnavailable):
		br.Record(tk, err)
	default:
		br.Record(tk, nil)
	}
	return v, err
}

// call0 is call for a store call that returns only an error.
func call0(ctx context.Context, br *circuit.Breaker, f func() error) error {
	_, err := call(ctx, br, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

func (g gatedStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	return call(ctx, g.br, func() (driver.ClaimResult, error) { return g.Store.Claim(ctx, req) })
}

func (g gatedStore) Get(ctx context.Context, key string, now time.Time) (driver.Record, error) {
	return call(ctx, g.br, func() (driver.Record, error) { return g.Store.Get(ctx, key, now) })
}

func (g gatedStore) Finish(ctx context.Context, f driver.FinishRequest) error {
	return call0(ctx, g.br, func() error { return g.Store.Finish(ctx, f) })
}

func (g gatedStore) Extend(ctx context.Context, req driver.ExtendRequest) error {
	return call0(ctx, g.br, func() error { return g.Store.Extend(ctx, req) })
}

func (g gatedStore) Reopen(ctx context.Context, r driver.ReopenRequest) (driver.Record, error) {
	return call(ctx, g.br, func() (driver.Record, error) { return g.Store.Reopen(ctx, r) })
}

// gatedBound records every result's write in the store's circuit, as
// gatedStore does. The claim made at receive is not a call of the message's
// own: a message whose claim already answered (a duplicate) and that writes
// no result makes no store call, closes nothing and holds no trial.
type gatedBound struct {
	driver.Bound
	br *circuit.Breaker
}

func (g gatedBound) Finish(ctx context.Context, f driver.FinishRequest) error {
	return call0(ctx, g.br, func() error { return g.Bound.Finish(ctx, f) })
}

// baselineHandler is the pipeline without the idempotency claim: parse,
// debit, notify, ack. Every redelivery becomes another debit request.
func baselineHandler(debiter charge.Debiter, notifier charge.Notifier) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, d *consumer.Delivery) consumer.Decision {
		c, err := charge.ParseEvent(d.Body)
		if err != nil {
			return consumer.Decision{Action: consumer.DeadLetter, Reason: queue.Reason{Code: chargehandler.Code(charge.Invalid), Detail: charge.InvalidResult(err).Reason}}
		}
		receipt, err := debiter.Debit(ctx, c.DebitRequest())
		if err != nil {
			if charge.Classify(err) == charge.ClassPermanent {
				return consumer.Decision{Action: consumer.DeadLetter, Reason: queue.Reason{Code: chargehandler.Code(charge.DebitFailed), Detail: err.Error()}}
			}
			return consumer.Decision{Action: consumer.Retry, Reason: queue.Reason{Code: chargehandler.Code(charge.RetryLater), Detail: err.Error()}}
		}
		_ = notifier.NotifyPreDebit(ctx, c, receipt)
		return consumer.Decision{Action: consumer.Ack}
	})
}

// AuthDesc names how the bank is authenticated to (never a credential).
func (b Bank) AuthDesc() string {
	if b.Auth == nil {
		return "none"
	}
	return b.Auth.Describe()
}

// KeyDesc names the fingerprint keys by id (never the keys).
func (c Config) KeyDesc() string {
	k, err := c.Keys()
	if err != nil || k == nil {
		return "none (unkeyed)"
	}
	return k.KeyID()
}

// ClaimsDesc says where the claims are written.
func (p *Pipeline) ClaimsDesc() string {
	if p.Colocated {
		return "in the queue's transactions (receive, delete / dead-letter)"
	}
	return "store calls of their own"
}
