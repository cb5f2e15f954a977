package cli

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	neturl "net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/metric"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
)

// More exit codes, for client commands.
const (
	ExitHeld     = 3 // acquire: the lease is held by someone else
	ExitNotFound = 4 // the lease is not live (get, renew, release, revoke)
	ExitLost     = 5 // acquire --hold, register: the lease was lost while held; run, elect: lost, and the command exited 0 all the same
	ExitRefused  = 6 // renew/release: not the holder, or a stale revision
	ExitDenied   = 7 // the NATS server refused the credentials, or its permissions a publish or subscription
)

// natsFlags say how to reach NATS, as NATS clients usually take them.
type natsFlags struct {
	creds, nkey, tlsCA, tlsCert, tlsKey string
	inboxPrefix                         string
	user, password                      string
}

func (n *natsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&n.creds, "creds", "", "NATS user credentials file (a JWT and its seed)")
	fs.StringVar(&n.nkey, "nkey", "", "NATS nkey seed file (a user's SU… seed, for a server that lists users by nkey)")
	fs.StringVar(&n.tlsCA, "tls-ca", "", "CA certificate to verify the NATS server")
	fs.StringVar(&n.tlsCert, "tls-cert", "", "client certificate for NATS (with --tls-key)")
	fs.StringVar(&n.tlsKey, "tls-key", "", "client key for NATS (with --tls-cert)")
	fs.StringVar(&n.inboxPrefix, "inbox-prefix", os.Getenv("LEASED_INBOX_PREFIX"),
		"prefix of the subjects replies come back on, instead of _INBOX, for users whose permissions allow only their own inbox "+
			"(env LEASED_INBOX_PREFIX; the service answers only on the prefixes of its --reply-prefixes, _INBOX… by default)")
	// The password's default is read when connecting: help never shows it.
	fs.StringVar(&n.user, "user", os.Getenv("LEASED_USER"), "NATS user name (env LEASED_USER)")
	fs.StringVar(&n.password, "password", "", "NATS password, with --user (env LEASED_PASSWORD, which unlike the flag other users cannot read in ps)")
}

// options returns the options the flags give, checking the flags and
// reading their files first: serve calls it before it starts anything.
func (n *natsFlags) options() ([]nats.Option, error) {
	var opts []nats.Option
	if p := n.inboxPrefix; p != "" {
		if strings.ContainsAny(p, "*> \t") || strings.HasSuffix(p, ".") || strings.HasPrefix(p, ".") {
			return nil, usageError{fmt.Errorf("--inbox-prefix %q: want a subject without wildcards, spaces or a leading or trailing dot", p)}
		}
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	if n.creds != "" {
		if n.user != "" {
			// Taken silently, the password with it unused, where --nkey
			// with --user was refused (found by an outside client).
			return nil, usageError{errors.New("--creds is a user's whole credential: not with --user (or LEASED_USER)")}
		}
		if err := checkOption("--creds", nats.UserCredentials(n.creds)); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(n.creds))
	}
	if n.nkey != "" {
		// nkeys were listed as supported, and no command could use them
		// (found by an outside client).
		if n.creds != "" || n.user != "" {
			return nil, usageError{errors.New("--nkey is a user's whole credential: not with --creds or --user")}
		}
		opt, err := nats.NkeyOptionFromSeed(n.nkey)
		if err != nil {
			// Its text names the file, never the seed.
			return nil, usageError{fmt.Errorf("--nkey %s: want a file with a user's nkey seed (SU…): %v", n.nkey, err)}
		}
		opts = append(opts, opt)
	}
	if n.user != "" {
		opts = append(opts, nats.UserInfo(n.user, cmp.Or(n.password, os.Getenv("LEASED_PASSWORD"))))
	} else if n.password != "" {
		return nil, usageError{errors.New("--password needs --user")}
	}
	if n.tlsCA != "" {
		if err := checkOption("--tls-ca", nats.RootCAs(n.tlsCA)); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(n.tlsCA))
	}
	if (n.tlsCert == "") != (n.tlsKey == "") {
		return nil, usageError{errors.New("--tls-cert and --tls-key go together")}
	}
	if n.tlsCert != "" {
		if err := checkOption("--tls-cert/--tls-key", nats.ClientCert(n.tlsCert, n.tlsKey)); err != nil {
			return nil, err
		}
		opts = append(opts, nats.ClientCert(n.tlsCert, n.tlsKey))
	}
	return opts, nil
}

// connect dials url with kvlease.ConnOptions: publishes are not buffered
// while reconnecting (a renewal held in a buffer could be flushed after
// the holder's deadline; failing it at once lets the keeper retry
// instead), and a server that stops answering is left for another within
// seconds.
// onErr, if not nil, receives the connection's asynchronous errors (such as
// the server's permissions violations) on nats.go's callback goroutine, in
// order; it must not block.
func (n *natsFlags) connect(url, name string, timeout time.Duration, onErr func(error), extra ...nats.Option) (*nats.Conn, error) {
	opts, err := n.options()
	if err != nil {
		return nil, err
	}
	opts = append(append(append(kvlease.ConnOptions(), nats.Name(name), nats.Timeout(timeout)), extra...), opts...)
	if onErr != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { onErr(err) }))
	}
	if err := checkURLs(url); err != nil {
		return nil, err
	}
	if urlCredentials(url) && (n.user != "" || n.creds != "" || n.nkey != "") {
		// nats.go used the URL's and ignored the flags: a command could
		// run as a user with more permissions than the one asked for
		// (found by an outside client).
		return nil, usageError{fmt.Errorf("NATS URL %s carries credentials, and so do --user (or LEASED_USER), --creds or --nkey: give them one way",
			redact.URL(url))}
	}
	nc, err := nats.Connect(url, opts...)
	var badURL *neturl.Error
	switch {
	case errors.As(err, &badURL):
		// Its text would carry the URL whole, password and all.
		return nil, usageError{fmt.Errorf("NATS URL %s: %v", redact.URL(url), badURL.Err)}
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		// Not "unavailable": waiting or retrying will not help.
		hint := "none given, or not its: --user and LEASED_PASSWORD, --creds, --nkey, or a user in the URL"
		if n.user != "" && n.password == "" && os.Getenv("LEASED_PASSWORD") == "" {
			// A user without its password: "none given" did not say which
			// was missing (found following README "Security").
			hint = fmt.Sprintf("--user %q (or LEASED_USER) without a password: set LEASED_PASSWORD, or --password", n.user)
		}
		return nil, fmt.Errorf("%w: connect to %s: the NATS server refused the credentials (%s): %w",
			ErrPermissionDenied, redact.URL(url), hint, err)
	case serverNotTrusted(err):
		// This client's refusal of the server's certificate: a failure of
		// its set-up (exit 1), not the server's refusal of its
		// credentials (exit 7; found by an outside client).
		return nil, fmt.Errorf("connect to %s: the server's TLS certificate is not trusted (--tls-ca: the CA that signed it; "+
			"a host name or address it names): %w", redact.URL(url), err)
	case errors.Is(err, nats.ErrSecureConnWanted), errors.Is(err, nats.ErrSecureConnRequired):
		// One side asks for TLS and the other does not offer it: a
		// failure of the set-up that no retry mends, not "grantor
		// unavailable". A client given --tls-ca or --tls-cert never
		// falls back to a plaintext link.
		return nil, fmt.Errorf("connect to %s: TLS is asked for on one side and not offered on the other (--tls-ca, --tls-cert and "+
			"tls:// ask for it; the server offers it where its configuration has a tls block): %w", redact.URL(url), err)
	case tlsFailure(err):
		// Most often the server's refusal of this client's certificate,
		// which it names only in its own log.
		return nil, fmt.Errorf("%w: connect to %s: TLS failed (check --tls-ca; a server that verifies client certificates "+
			"refuses a missing one, an expired one or one of another CA: --tls-cert and --tls-key; its log says which): %w",
			ErrPermissionDenied, redact.URL(url), err)
	case silent(err):
		// A raw "i/o timeout" said nothing of the likely cause (found by
		// an outside client, asking a stopped node for its status).
		return nil, fmt.Errorf("%w: connect to %s: no NATS server answered in time (%v each; one that accepts connections "+
			"and says nothing is stopped or overloaded): %w", kvlease.ErrUnavailable, redact.URL(url), timeout, err)
	case err != nil:
		return nil, fmt.Errorf("%w: connect to %s: %w", kvlease.ErrUnavailable, redact.URL(url), err)
	}
	return nc, nil
}

// silent says whether a connection attempt ended for want of an answer.
func silent(err error) bool {
	var ne net.Error
	return errors.Is(err, nats.ErrTimeout) || errors.As(err, &ne) && ne.Timeout()
}

// serverNotTrusted reports whether err is this client's verification of
// the server's certificate failing.
func serverNotTrusted(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}

// tlsFailure reports whether err is a failed TLS handshake: nats.go's, or
// the server's alert, which with TLS 1.3 comes after the client's
// handshake is done (a client certificate missing or refused).
func tlsFailure(err error) bool {
	var op *net.OpError
	return errors.Is(err, nats.ErrTLS) || errors.As(err, &op) && op.Op == "remote error"
}

// checkOption applies a file option (TLS files, credentials) to a
// throwaway nats.Options, as nats.Connect does, and signs a nonce with
// credentials as a server would ask: a file that cannot be read or
// parsed is a usage error naming its flag, not "grantor unavailable" (or,
// for a credentials file without a seed, a failure in the handshake).
func checkOption(flag string, opt nats.Option) error {
	o := nats.GetDefaultOptions()
	err := opt(&o)
	if err == nil && o.SignatureCB != nil {
		_, err = o.SignatureCB([]byte("nonce"))
	}
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", flag, err)}
	}
	return nil
}

// checkURLs refuses, as a usage error, a NATS URL list with a port no
// server can listen on (nats.go tried to dial it, and that failed as
// "unavailable"), or with a '#', '?' or '/' before its last '@': a URL
// parser ends the host there, and its error quoted the password's pieces
// (an outside client's "invalid port \":<password>\" after host"), or
// with a scheme nats.go does not know: it dials any other in plain TCP,
// so https:// connected without TLS, or with no host (nats://). Other
// malformations are left to nats.go's parser.
func checkURLs(urls string) error {
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue // an empty entry (a trailing comma): nats.go's to skip
		}
		start := 0
		if j := strings.Index(u, "://"); j >= 0 {
			start = j + len("://")
			if scheme := strings.ToLower(u[:j]); !slices.Contains(natsSchemes, scheme) {
				return usageError{fmt.Errorf("NATS URL %s: scheme %q: want nats://, tls:// (TLS required), ws:// or wss://",
					redact.URL(u), u[:j])}
			}
		}
		if at := strings.LastIndexByte(u, '@'); at > start && strings.ContainsAny(u[start:at], "#?/") {
			return usageError{fmt.Errorf("NATS URL %s: the user or password has a '#', '?' or '/', which ends a URL's host: write them %%23, %%3F and %%2F",
				redact.URL(u))}
		}
		if !strings.Contains(u, "://") {
			u = "nats://" + u // as nats.go reads a URL without a scheme
		}
		p, err := neturl.Parse(u)
		if err == nil && p.Host == "" {
			// "nats://" was "grantor unavailable", exit 1.
			return usageError{fmt.Errorf("NATS URL %s: no host: want, for example, nats://127.0.0.1:4222", redact.URL(u))}
		}
		if err != nil || p.Port() == "" {
			continue
		}
		if n, err := strconv.Atoi(p.Port()); err != nil || n < 1 || n > 65535 {
			return usageError{fmt.Errorf("NATS URL %s: port %s out of range 1..65535", redact.URL(u), p.Port())}
		}
	}
	return nil
}

// natsSchemes are the URL schemes nats.go dials as they say: tls and wss
// require TLS, nats and ws take it if the server offers it.
var natsSchemes = []string{"nats", "tls", "ws", "wss"}

// urlCredentials reports whether a URL of urls names a user (or token).
func urlCredentials(urls string) bool {
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		if p, err := neturl.Parse(u); err == nil && p.User != nil {
			return true
		}
	}
	return false
}

// ErrPermissionDenied: the NATS server's permissions refused a publish or a
// subscription of this command (see [PermissionError]).
var ErrPermissionDenied = errors.New("permission denied")

// PermissionError is a permissions violation the NATS server reported for
// one of the command's publishes or subscriptions. It matches
// [ErrPermissionDenied] and nats.ErrPermissionViolation.
type PermissionError struct {
	Op      string // "publish" or "subscribe"
	Subject string
	Err     error // nats.go's error
}

var permissionRe = regexp.MustCompile(`(?i)violation for (publish|subscription) to "([^"]*)"`)

// permissionError returns the PermissionError err reports, or nil if err is
// no permissions violation.
func permissionError(err error) *PermissionError {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	pe := &PermissionError{Err: err}
	if m := permissionRe.FindStringSubmatch(err.Error()); m != nil {
		pe.Op, pe.Subject = "publish", m[2]
		if strings.EqualFold(m[1], "subscription") {
			pe.Op = "subscribe"
		}
	}
	return pe
}

func (e *PermissionError) Error() string {
	if e.Subject == "" {
		return fmt.Sprintf("%v: %v", ErrPermissionDenied, e.Err)
	}
	msg := fmt.Sprintf("%v: the NATS server does not let this user %s to %q", ErrPermissionDenied, e.Op, e.Subject)
	switch {
	case e.Op == "subscribe" && serviceSubject(e.Subject):
		// serve's own endpoints: no --inbox-prefix mends that (it said
		// so for "lease.v1.>"; found by an outside client).
		msg += " (serve answers the lease service on lease.v1.>, lease.admin.v1.revoke, svc.v1.> and $SRV.> " +
			"(nats micro's discovery, which leased status uses): allow this user to subscribe to them, as the leased user of docs/api.md may)"
	case e.Op == "subscribe":
		msg += " (replies come back on the inbox: give the prefix this user may subscribe to with --inbox-prefix)"
	case e.Op == "publish" && e.Subject == api.SubjectGet:
		// A user allowed lease.v1.grant, renew and release but not get could
		// not acquire at all, told only of get (found by an outside client):
		// a grant first reads the grantor's clock there.
		msg += " (acquire, run and register read the grantor's clock there before a grant, " +
			"so a user that grants needs it too: allow lease.v1.get, or lease.v1.> as the app user of docs/api.md)"
	case e.Op == "publish" && strings.HasPrefix(e.Subject, "$JS.API.") && strings.Contains(e.Subject, ".KV_") &&
		!strings.HasPrefix(e.Subject, "$JS.API.STREAM.UPDATE."):
		// docs/api.md's app user, running elect (a lease command, as run
		// is), was told only of a JetStream subject (found following the
		// documented users, s13d).
		msg += " (this command reads the lease bucket's stream itself, not through the lease service: elect, watch, " +
			"status, history (for the live leases) and bench --direct need JetStream access to it, as the operator user of docs/api.md has; " +
			"through the service, as its app user may: acquire, run, register, get and ls)"
	case e.Op == "publish" && strings.HasPrefix(e.Subject, "$JS.API.") && strings.Contains(e.Subject, ".LEASED_HISTORY_") &&
		!strings.HasPrefix(e.Subject, "$JS.API.STREAM.UPDATE."):
		// The app user's history said only which subject (found following
		// the documented users, s21b).
		msg += " (history reads the grantor's history stream itself, not through the lease service: allow this user " +
			"to read it, as the auditor user of docs/api.md may, or the operator)"
	case e.Op == "publish" && strings.HasPrefix(e.Subject, "svc.v1."):
		// The app user of docs/api.md registers through lease.v1.>, but
		// may not ask the registry (found following the documented users).
		msg += fmt.Sprintf(" (the service registry answers on svc.v1.>, which the app user of docs/api.md may not publish to "+
			"(it registers through lease.v1.>): allow this user to publish to %s)", e.Subject)
	case strings.HasPrefix(e.Subject, "$JS.API.STREAM.UPDATE.KV_") || strings.HasPrefix(e.Subject, "$JS.API.STREAM.UPDATE.LEASED_HISTORY_"):
		// serve refused to start, exit 7, saying only this (found by an
		// outside client with a user of its own for leased).
		msg += " (opening a lease bucket made without atomic batches updates its stream to allow them, and serve updates it to record " +
			"a changed --grantor-margin, --min-ttl or --max-ttl, and the history's stream for a changed --history-retention; " +
			"a bucket and history serve creates need no update: allow this user to update them, as the leased user of docs/api.md may)"
	}
	return msg
}

// serviceSubject reports whether subject is one the lease service
// subscribes to (its endpoints, the registry's and micro's), not an inbox.
func serviceSubject(subject string) bool {
	for _, p := range []string{"lease.", "svc.", "$SRV."} {
		if strings.HasPrefix(subject, p) {
			return true
		}
	}
	return false
}

func (e *PermissionError) Unwrap() []error { return []error{ErrPermissionDenied, e.Err} }

// connFlags are the flags every client command takes.
type connFlags struct {
	natsFlags
	url     string
	holder  string
	output  string
	timeout time.Duration
	meter   metric.MeterProvider // set by startMetrics
	// optional, if set before withConn, takes the refusals of what a
	// command can do without (it reports true): they do not end it.
	optional func(*PermissionError) bool
}

func (c *connFlags) register(fs *pflag.FlagSet) {
	url := os.Getenv("LEASED_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	fs.StringVar(&c.url, "url", url, "NATS server URL(s), comma-separated (env LEASED_URL)")
	// --help prints the default: LEASED_URL's password or token as xxxxx
	// (it printed them: found by an outside client).
	fs.Lookup("url").DefValue = redact.URL(url)
	c.natsFlags.register(fs)
	fs.StringVarP(&c.output, "output", "o", "text", "output format: text or json (one JSON object per line: per lease, event or row)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "time to wait for the server, connecting included (for a grant: all its attempts)")
}

// grantContext bounds a command's grant by --timeout: kvlease.Acquire
// sends a grant that got no answer again, with the same request id, until
// its context ends, and a command must not wait for ever on a server that
// is down.
func (c *connFlags) grantContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// registerHolder adds --holder, for the commands where a holder acts. Its
// default is computed when the command runs, not when the help is printed.
func (c *connFlags) registerHolder(fs *pflag.FlagSet) {
	fs.Var((*holderValue)(&c.holder), "holder", "holder identity (default: HOST-PID, the host name and the id of this process)")
}

// holderValue is --holder's value: an empty one is refused, not taken for
// the default (`--holder "$UNSET"` acquired as HOST-PID, unnoticed), and
// so is any the grant would refuse, before connecting: a holder of 2000
// bytes was refused only by the grant, and "grantor unavailable" (exit 1)
// without a server, where an empty one was refused here (found by an
// outside client).
type holderValue string

func (h *holderValue) String() string { return string(*h) }
func (h *holderValue) Type() string   { return "string" }
func (h *holderValue) Set(v string) error {
	if err := kvlease.ValidateHolder(v); err != nil {
		return err
	}
	*h = holderValue(v)
	return nil
}

// defaultTTL is the lease duration acquire, run and elect ask for by
// default: the value of serve's --default-ttl default. A holder must know
// its D before it asks (its deadline counts from the request), so the
// command cannot take whatever a server was started with.
var defaultTTL = grantor.DefaultConfig().DefaultDuration

// ttlUsage is the help of their --ttl.
const ttlUsage = "lease duration D (the command's own, not the server's --default-ttl; in a cluster use 20s or more)"

func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

func (c *connFlags) check() error {
	if strings.Trim(c.url, " \t,") == "" {
		// nats.go would take it for its default, nats://127.0.0.1:4222.
		return usageError{errors.New("--url is empty: give the NATS server URL(s)")}
	}
	if c.output != "text" && c.output != "json" {
		return usageError{fmt.Errorf("-o %q: want text or json", c.output)}
	}
	if c.timeout <= 0 {
		return usageError{fmt.Errorf("--timeout %v: want a positive duration", c.timeout)}
	}
	return nil
}

// openStore opens an existing lease bucket directly, for the commands that
// read its stream (watch, elect).
func (c *connFlags) openStore(ctx context.Context, nc *nats.Conn, bucket string, opts ...kvlease.Option) (*kvlease.Store, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return kvlease.Open(ctx, js, append([]kvlease.Option{kvlease.WithBucket(bucket), kvlease.WithoutCreate()}, opts...)...)
}

// client returns a client of the service on nc; an error is a bad flag.
func (c *connFlags) client(nc *nats.Conn) (*client.Client, error) {
	opts := []client.Option{client.WithTimeout(c.timeout)}
	if c.meter != nil {
		opts = append(opts, client.WithMeterProvider(c.meter))
	}
	cl, err := client.New(nc, opts...)
	if err != nil {
		return nil, usageError{err}
	}
	return cl, nil
}

// exitCode maps a client error to the documented exit code.
func exitCode(err error) int {
	var ue usageError
	var fe failedError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &fe):
		return ExitError
	case errors.As(err, &ue), errors.Is(err, kvlease.ErrInvalidName), errors.Is(err, kvlease.ErrInvalidHolder),
		errors.Is(err, kvlease.ErrInvalidOption),
		errors.Is(err, kvlease.ErrDurationOutOfRange), errors.Is(err, kvlease.ErrInvalidTiming),
		errors.Is(err, api.ErrInvalidRequest), errors.Is(err, api.ErrTooLarge), errors.Is(err, kvlease.ErrTooLarge):
		return ExitUsage
	case errors.Is(err, ErrPermissionDenied):
		return ExitDenied
	case errors.Is(err, kvlease.ErrHeld):
		return ExitHeld
	case errors.Is(err, errLost):
		return ExitLost
	case errors.Is(err, kvlease.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, kvlease.ErrNotHolder):
		return ExitRefused
	default:
		return ExitError
	}
}

var errLost = errors.New("lease lost")

// textSafe is s for a terminal: as is if every rune is printable, else
// with Go's escapes for what is not (\x1b, \n, \t, \u202e). A reason
// or attribute any client may set printed raw could clear an operator's
// screen, forge lines or break the columns (found by an outside client:
// history and get printed ESC and BEL as they were).
func textSafe(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// field is s as one field of a line of fields (a table's column, a
// key=value): quoted if it has a space, a quote or an '=', or is not
// printable, so that the line still splits into its fields. A holder
// named with spaces could not be told from the fields after it (found by
// an outside client).
func field(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == ' ' || r == '"' || r == '=' || !unicode.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}

// printer writes results as text or JSON lines.
type printer struct {
	w    io.Writer
	json bool
}

func (c *connFlags) printer(w io.Writer) printer { return printer{w: w, json: c.output == "json"} }

// leaseJSON is a lease as -o json prints it: server_time is left out when
// the reply carried none (a record from the Go client, whose own replies'
// times feed its clock estimate).
type leaseJSON struct {
	api.Lease
	ServerTime *time.Time `json:"server_time,omitempty"`
}

// lease prints l, and returns the error of writing it (a full disk, a
// closed stdout): acquire and renew print what the next renew needs.
func (p printer) lease(l api.Lease) error {
	if p.json {
		out := leaseJSON{Lease: l}
		if !l.ServerTime.IsZero() {
			out.ServerTime = &l.ServerTime
		}
		return p.obj(out)
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\nholder\t%s\ntoken\t%d\nrevision\t%d\nttl\t%v\nserver_ttl\t%v\nexpires_at\t%s\n",
		l.Name, l.Holder, l.Token, l.Revision, time.Duration(l.TTL), time.Duration(l.ServerTTL),
		l.ExpiresAt.Format(time.RFC3339Nano))
	if l.Secret != "" {
		fmt.Fprintf(tw, "secret\t%s\n", l.Secret)
	}
	for _, k := range slices.Sorted(maps.Keys(l.Attributes)) {
		fmt.Fprintf(tw, "attr.%s\t%s\n", textSafe(k), textSafe(l.Attributes[k]))
	}
	return tw.Flush()
}

func (p printer) leases(ls []api.Lease) {
	if p.json {
		for _, l := range ls {
			p.obj(l)
		}
		return
	}
	tw, flush := p.table()
	defer flush()
	fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tTTL\tEXPIRES IN\tFLAGS")
	now := time.Now()
	for _, l := range ls {
		flag := ""
		if l.Flapping {
			flag = "FLAPPING"
		}
		var in any = l.ExpiresAt.Sub(now).Round(100 * time.Millisecond)
		if in.(time.Duration) <= 0 {
			in = "lapsing" // due, and the server has not removed it yet (it does so late, never early)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\t%s\n", l.Name, field(l.Holder), l.Token, time.Duration(l.TTL), in, flag)
	}
}

// table is a tabwriter for a text table of p's, with its flush: it writes
// to p.w through a buffer, whole blocks of rows at once. It wrote each
// cell and its padding on its own, 18 writes a row of history's, and
// 100,000 tenures as text took 6.8 s against -o json's 1.3 s, in writes
// to an unbuffered stdout (found by an outside client).
func (p printer) table() (*tabwriter.Writer, func()) {
	bw := bufio.NewWriterSize(p.w, 64<<10)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	return tw, func() {
		tw.Flush()
		bw.Flush()
	}
}

func (p printer) obj(v any) error {
	b, _ := json.Marshal(v)
	_, err := fmt.Fprintln(p.w, string(b))
	return err
}

func (p printer) line(format string, args ...any) {
	if !p.json {
		fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// parseAttrs reads the key=value pairs given to flag (--attr, --meta).
func parseAttrs(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--%s %q: want key=value", flag, kv)}
		}
		if _, twice := m[k]; twice {
			// The last one was kept, silently (found by an outside client).
			return nil, usageError{fmt.Errorf("--%s %q: key %q given twice", flag, kv, k)}
		}
		m[k] = v
	}
	return m, nil
}

// connectAttempt bounds the connection attempt to each server of --url
// (nats.go's default): a paused server accepts the connection and never
// answers, and the next server gets its turn after this.
const connectAttempt = 2 * time.Second

// withConn runs fn with a connection and the command's context. A
// permissions violation the server reports for the connection cancels that
// context at once and is the command's error: a request the server refused
// to deliver gets no reply, and would otherwise end as "unavailable" when
// its timeout runs out.
func withConn(cmd *cobra.Command, c *connFlags, fn func(ctx context.Context, nc *nats.Conn) error) error {
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(cmd.Context())
	defer cancel(nil)
	// The refusals, apart from interrupts: the release a command sends
	// after one (cleanupContext) ends at a refusal too.
	var seen refusals
	ctx = context.WithValue(ctx, refusalsKey{}, &seen)
	refuse := func(err error) { seen.add(err); cancel(err) } // recorded before the cancel is seen
	// nats.go's error and reconnect handler calls are in order, on one
	// goroutine. A successful reconnect forgives a refusal, as nats.go
	// does (it forgets a server's last error then): counted for the whole
	// session, two brief refusals hours apart, each recovered from, ended
	// the command (found in review).
	authRefusals := 0
	forgive := nats.ReconnectHandler(func(*nats.Conn) { authRefusals = 0 })
	warned := false
	start := time.Now()
	servers := max(1, strings.Count(c.url, ",")+1) // tried one after another: together within --timeout
	nc, err := c.natsFlags.connect(c.url, "leased-cli", min(c.timeout/time.Duration(servers), connectAttempt), func(err error) {
		pe := permissionError(err)
		switch {
		case pe == nil:
			if ae := authorizationEnded(err, &authRefusals); ae != nil {
				refuse(ae)
			}
		case c.optional != nil && c.optional(pe):
		case pe.Op == "subscribe" && strings.HasPrefix(pe.Subject, api.SubjectEvents):
			// The change events only hasten finding a loss (client.Ends):
			// without them it is found at the next renewal.
			if !warned {
				warned = true
				fmt.Fprintf(cmd.ErrOrStderr(), "leased: warning: the NATS server does not let this user subscribe to %q: a revocation is noticed at the next renewal\n", pe.Subject)
			}
		default:
			refuse(pe)
		}
	}, forgive)
	if err != nil {
		return err
	}
	defer nc.Close()
	// --timeout bounds the whole wait for the server: what connecting
	// took (a server that accepts and never answers costs an attempt)
	// comes out of what the command's requests may wait.
	c.timeout = max(c.timeout-time.Since(start), time.Millisecond)
	if c.holder == "" {
		c.holder = defaultHolder()
	}
	// A command that ends "cleanly" because the refusal cancelled its
	// context (acquire --hold releases and returns) still failed.
	return permissionCause(ctx, fn(ctx, nc))
}

// permissionCause returns the refusal ([ErrPermissionDenied]) that
// cancelled ctx, or that came after an interrupt had (a release denied),
// if one did, in place of err (what the cancellation caused, or nil). A
// release denied after SIGTERM ended as "unavailable" after its timeout,
// exit 1 (found by an outside client). An err that is itself a permissions
// violation is returned as its [PermissionError].
func permissionCause(ctx context.Context, err error) error {
	if errors.Is(err, ErrPermissionDenied) {
		return err // says so already, with what it was doing
	}
	for _, cause := range []error{context.Cause(ctx), deniedCause(ctx)} {
		if errors.Is(cause, ErrPermissionDenied) {
			return cause
		}
	}
	// A refusal the call recognised itself (kvlease.Open's ErrPermission)
	// comes back before nats.go's error handler has run: elect on a
	// bucket its user may not update exited 1 or 7 as that race went.
	if pe := permissionError(err); pe != nil {
		return pe
	}
	return err
}

type refusalsKey struct{}

// refusals are the server's refusals withConn has seen.
type refusals struct {
	mu       sync.Mutex
	distinct []error         // the first refusal of each kind (refusalKind), in order
	kinds    map[string]bool // of distinct
	next     chan struct{}   // closed at the next refusal of a new kind
}

// refusalKind says what a refusal refused: the same publish refused again
// (a renewal retried) is the same kind.
func refusalKind(err error) string {
	if pe := (*PermissionError)(nil); errors.As(err, &pe) {
		return pe.Op + " " + pe.Subject
	}
	return err.Error()
}

func (r *refusals) add(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := refusalKind(err)
	if r.kinds[k] {
		return
	}
	if r.kinds == nil {
		r.kinds = map[string]bool{}
	}
	r.kinds[k] = true
	r.distinct = append(r.distinct, err)
	if r.next != nil {
		close(r.next)
	}
	r.next = make(chan struct{})
}

// kindsSeen is how many kinds of refusal have come.
func (r *refusals) kindsSeen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.distinct)
}

// newKind returns the first refusal of a kind after the first seen kinds,
// once one comes, or nil when stop closes first.
func (r *refusals) newKind(seen int, stop <-chan struct{}) error {
	for {
		r.mu.Lock()
		if len(r.distinct) > seen {
			err := r.distinct[seen]
			r.mu.Unlock()
			return err
		}
		if r.next == nil {
			r.next = make(chan struct{})
		}
		next := r.next
		r.mu.Unlock()
		select {
		case <-next:
		case <-stop:
			return nil
		}
	}
}

// deniedCause is the first refusal withConn saw, or nil.
func deniedCause(ctx context.Context) error {
	if r, ok := ctx.Value(refusalsKey{}).(*refusals); ok {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.distinct) > 0 {
			return r.distinct[0]
		}
	}
	return nil
}

// cleanupContext is the context of what a command sends as it ends (a
// release), for up to d: not ended by an interrupt that ended ctx, but at
// once by a refusal of the server that withConn sees from then on, of a
// kind not refused before (a release the user may not send waited for d).
// A refusal before it (of a renewal, say), or another of that kind as a
// renewal in flight is refused again, does not end it: a user who may not
// renew may release, and acquire --hold, denied its first renewal, left
// its lease held for its TTL (found by an outside client).
func cleanupContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	rctx, tcancel := context.WithTimeout(rctx, d)
	if r, ok := ctx.Value(refusalsKey{}).(*refusals); ok {
		seen := r.kindsSeen()
		go func() {
			if err := r.newKind(seen, rctx.Done()); err != nil {
				cancel(err)
			}
		}()
	}
	return rctx, func() { tcancel(); cancel(nil) }
}

// releaseContext is cleanupContext for the release a command sends as it
// ends, holding l: the release is tried again while l would be held anyway
// (after that it frees nothing that lapsing does not), and for d at
// least. Bounded by --timeout (5 s by default), a release sent during a
// stream-leader failover (5.5–7.7 s in the cluster tests) failed, and the
// next holder waited out the whole TTL (found by an outside client).
// Should the release go unanswered for slowRelease, notice is told how
// long it may still take (the command says so, and that a second stop
// signal ends it at once: see StopsTwice).
func releaseContext(ctx context.Context, l *kvlease.Lease, d time.Duration, notice func(left time.Duration)) (context.Context, context.CancelFunc) {
	end := time.Now().Add(max(d, l.Remaining()))
	rctx, cancel := cleanupContext(ctx, time.Until(end))
	t := time.AfterFunc(slowRelease, func() { notice(time.Until(end).Round(time.Second)) })
	return rctx, func() { t.Stop(); cancel() }
}

// slowRelease is how long a command's last release goes unanswered before
// the command says it is still trying.
const slowRelease = time.Second

// authorizationEnded is the error of a connection whose authorization the
// server ended after it had connected (credentials that expired, a user
// revoked), or nil: the command cannot go on, which waiting will not
// change. It was reported as a lost connection or a lost lease (found by
// an outside client). A plain refusal ("Authorization Violation") counts
// only the second time in a row (refusals counts them, withConn sets
// them to 0 at a successful reconnect): one may come from a server whose
// authorization is briefly unavailable (an auth callout restarting) as a
// reconnect tries it, and nats.go gives up only at the second on one
// server (found in review).
func authorizationEnded(err error, refusals *int) error {
	ended := errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
	if errors.Is(err, nats.ErrAuthorization) {
		*refusals++
		ended = *refusals >= 2
	}
	if !ended {
		return nil
	}
	return fmt.Errorf("%w: the NATS server ended this connection's authorization (%w): renew the credentials (--creds), or check the user",
		ErrPermissionDenied, err)
}

// withClient is withConn for a command that needs only the service's
// client on the connection.
func withClient(cmd *cobra.Command, c *connFlags, fn func(ctx context.Context, cl *client.Client) error) error {
	return withConn(cmd, c, func(ctx context.Context, nc *nats.Conn) error {
		cl, err := c.client(nc)
		if err != nil {
			return err
		}
		return inboxHint(fn(ctx, cl), c.inboxPrefix)
	})
}

// inboxHint adds to err, a service that did not answer, that it drops
// requests whose replies go to an inbox its default --reply-prefixes do
// not cover, if prefix is one: only its log said so (found by an outside
// client, with --inbox-prefix myinbox).
func inboxHint(err error, prefix string) error {
	if prefix == "" || !errors.Is(err, kvlease.ErrUnavailable) || api.ReplySubjectOK(prefix+".x", nil) {
		return err
	}
	return fmt.Errorf("%w (--inbox-prefix %q: the lease service drops requests whose replies go elsewhere than its --reply-prefixes, "+
		"_INBOX… by default: use a prefix that begins _INBOX, or have serve name this one)", err, prefix)
}
