package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/kvlease"
)

// More exit codes, for client commands.
const (
	ExitHeld     = 3 // acquire: the lease is held by someone else
	ExitNotFound = 4 // the lease is not live (get, renew, release, revoke)
	ExitLost     = 5 // acquire --hold: the lease was lost while held
	ExitRefused  = 6 // renew/release: not the holder, or a stale revision
)

// connFlags are the flags every client command takes.
type connFlags struct {
	url     string
	creds   string
	holder  string
	output  string
	timeout time.Duration
}

func (c *connFlags) register(fs *pflag.FlagSet) {
	url := os.Getenv("LEASED_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	fs.StringVar(&c.url, "url", url, "NATS server URL(s), comma-separated (env LEASED_URL)")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials file")
	fs.StringVar(&c.holder, "holder", defaultHolder(), "holder identity (default: host name and process id)")
	fs.StringVarP(&c.output, "output", "o", "text", "output format: text or json")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "time to wait for the server")
}

func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

func (c *connFlags) check() error {
	if c.output != "text" && c.output != "json" {
		return usageError{fmt.Errorf("-o %q: want text or json", c.output)}
	}
	return nil
}

// connect opens a NATS connection for a client command.
func (c *connFlags) connect() (*nats.Conn, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name("leased-cli"), nats.Timeout(c.timeout)}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	nc, err := nats.Connect(c.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: connect to %s: %w", kvlease.ErrUnavailable, c.url, err)
	}
	return nc, nil
}

func (c *connFlags) client(nc *nats.Conn) *grantor.Client {
	return grantor.NewClient(nc, grantor.WithTimeout(c.timeout))
}

// exitCode maps a client error to the documented exit code.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue), errors.Is(err, kvlease.ErrInvalidName), errors.Is(err, kvlease.ErrInvalidHolder),
		errors.Is(err, kvlease.ErrDurationOutOfRange), errors.Is(err, kvlease.ErrInvalidTiming),
		errors.Is(err, grantor.ErrInvalidRequest):
		return ExitUsage
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

// printer writes results as text or JSON lines.
type printer struct {
	w    io.Writer
	json bool
}

func (c *connFlags) printer(w io.Writer) printer { return printer{w: w, json: c.output == "json"} }

func (p printer) lease(l grantor.Lease) {
	if p.json {
		p.obj(l)
		return
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name\t%s\nholder\t%s\ntoken\t%d\nrevision\t%d\nttl\t%v\nserver_ttl\t%v\nexpires_at\t%s\n",
		l.Name, l.Holder, l.Token, l.Revision, time.Duration(l.TTL), time.Duration(l.ServerTTL),
		l.ExpiresAt.Format(time.RFC3339Nano))
	if l.Secret != "" {
		fmt.Fprintf(tw, "secret\t%s\n", l.Secret)
	}
	for _, k := range slices.Sorted(maps.Keys(l.Attributes)) {
		fmt.Fprintf(tw, "attr.%s\t%s\n", k, l.Attributes[k])
	}
	tw.Flush()
}

func (p printer) leases(ls []grantor.Lease) {
	if p.json {
		for _, l := range ls {
			p.obj(l)
		}
		return
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tTTL\tEXPIRES IN")
	now := time.Now()
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\n", l.Name, l.Holder, l.Token, time.Duration(l.TTL),
			l.ExpiresAt.Sub(now).Round(100*time.Millisecond))
	}
	tw.Flush()
}

func (p printer) obj(v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(p.w, string(b))
}

func (p printer) line(format string, args ...any) {
	if !p.json {
		fmt.Fprintf(p.w, format+"\n", args...)
	}
}

func parseAttrs(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--attr %q: want key=value", kv)}
		}
		m[k] = v
	}
	return m, nil
}

// withConn runs fn with a connection and the command's context.
func withConn(cmd *cobra.Command, c *connFlags, fn func(ctx context.Context, nc *nats.Conn) error) error {
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	return fn(cmd.Context(), nc)
}
