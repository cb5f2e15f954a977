package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/membership"
)

// gossipFlags configure membership for serve and register.
type gossipFlags struct {
	listen        string
	seeds         []string
	profile       string
	keyFile       string
	allowInsecure bool
	key           []byte // from --gossip-key-file or LEASED_GOSSIP_KEY, by check
}

func (g *gossipFlags) register(fs *pflag.FlagSet, listenHelp string) {
	fs.StringVar(&g.listen, "gossip-listen", "", listenHelp)
	fs.StringSliceVar(&g.seeds, "gossip-seeds", nil, "gossip addresses host:port of members to join (comma-separated)")
	fs.StringVar(&g.profile, "gossip-profile", "lan", "gossip timing: lan (memberlist's: dead after ~5 s, longer while several members fail at once), fast (suspect after ~0.4 s, dead after ~3 s; loopback), test (dead after ~1 s); give every member the same: the fastest member's probes decide for all")
	fs.StringVar(&g.keyFile, "gossip-key-file", "", "file holding the gossip key, base64 of 16, 24 or 32 random bytes (head -c 32 /dev/urandom | base64), "+
		"the same on every member: gossip is then encrypted and authenticated (env LEASED_GOSSIP_KEY)")
}

// gossipKeyEnv holds the gossip key when no file names it.
const gossipKeyEnv = "LEASED_GOSSIP_KEY"

// readKey reads the gossip key from --gossip-key-file or LEASED_GOSSIP_KEY
// (nil if neither gives one).
func (g *gossipFlags) readKey() ([]byte, error) {
	text, from := os.Getenv(gossipKeyEnv), gossipKeyEnv
	if g.keyFile != "" {
		b, err := os.ReadFile(g.keyFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("--gossip-key-file: %w", err)}
		}
		text, from = string(b), "--gossip-key-file"
	}
	text = strings.TrimSpace(text)
	if text == "" && from == "--gossip-key-file" {
		// It meant "no key", silently, over LEASED_GOSSIP_KEY too (found
		// by an outside client).
		return nil, usageError{fmt.Errorf("--gossip-key-file %s is empty: want base64 of 16, 24 or 32 bytes (head -c 32 /dev/urandom | base64)", g.keyFile)}
	}
	if text == "" {
		return nil, nil
	}
	key, err := base64.StdEncoding.DecodeString(text)
	if err != nil || len(key) != 16 && len(key) != 24 && len(key) != 32 {
		// The key itself is never printed.
		return nil, usageError{fmt.Errorf("%s: want base64 of 16, 24 or 32 bytes (head -c 32 /dev/urandom | base64)", from)}
	}
	return key, nil
}

func (g *gossipFlags) enabled() bool { return g.listen != "" || len(g.seeds) > 0 }

// check refuses addresses that are no host:port, before anything starts
// (memberlist would look a bare word up in DNS).
func (g *gossipFlags) check() error {
	if _, _, err := g.config("check"); err != nil { // the profile, before anything starts
		return err
	}
	for _, seed := range g.seeds {
		if _, port, err := net.SplitHostPort(seed); err != nil {
			return usageError{fmt.Errorf("--gossip-seeds %q: want host:port (%v)", seed, err)}
		} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return usageError{fmt.Errorf("--gossip-seeds %q: bad port", seed)}
		}
	}
	if g.listen != "" {
		host, port, err := net.SplitHostPort(g.listen)
		if err != nil {
			return usageError{fmt.Errorf("--gossip-listen %q: %v", g.listen, err)}
		}
		if net.ParseIP(host) == nil {
			// memberlist binds an IP address only ("localhost" failed
			// after serve had started its server; an outside client).
			return usageError{fmt.Errorf("--gossip-listen %q: want an IP address and port, such as 127.0.0.1:7946", g.listen)}
		}
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return usageError{fmt.Errorf("--gossip-listen %q: bad port", g.listen)}
		}
		if g.key, err = g.readKey(); err != nil {
			return err
		}
		if !net.ParseIP(host).IsLoopback() && g.key == nil && !g.allowInsecure {
			return usageError{fmt.Errorf("--gossip-listen %s: gossip beyond loopback without a key (--gossip-key-file or %s): "+
				"anyone who can reach the port can declare any member dead, ending its registrations; give a key, "+
				"or, on a network you trust, --allow-insecure", g.listen, gossipKeyEnv)}
		}
		return nil
	}
	var err error
	g.key, err = g.readKey()
	return err
}

// loopbackSeeds reports whether every seed is a loopback address (a host
// name other than localhost counts as not).
func loopbackSeeds(seeds []string) bool {
	for _, s := range seeds {
		host, _, err := net.SplitHostPort(s)
		if ip := net.ParseIP(host); err != nil || host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

// config is the gossip configuration of --gossip-profile for a member
// named name, and how often to join the seeds again while none is live.
func (g *gossipFlags) config(name string) (membership.Config, time.Duration, error) {
	switch g.profile {
	case "lan":
		return membership.DefaultConfig(name), 5 * time.Second, nil
	case "fast":
		return membership.ProfileConfig(name, membership.ProfileFast), time.Second, nil
	case "test":
		return membership.TestConfig(name), 500 * time.Millisecond, nil
	}
	return membership.Config{}, 0, usageError{fmt.Errorf("--gossip-profile %q: want lan, fast or test", g.profile)}
}

// The gossip roles (membership Meta["role"]) of serve and register.
const (
	roleGrantor  = "grantor"
	roleInstance = "instance"
)

// start joins gossip as name with meta; it returns nil if gossip is off.
func (g *gossipFlags) start(name string, meta map[string]string, log *slog.Logger) (*membership.Node, error) {
	node, err := g.bind(name, meta, log)
	if node == nil || err != nil {
		return nil, err
	}
	if err := g.join(node, log); err != nil {
		return nil, err
	}
	return node, nil
}

// bind starts gossip as name with meta on its address, joining no one yet
// (no member knows it until join); it returns nil if gossip is off.
func (g *gossipFlags) bind(name string, meta map[string]string, log *slog.Logger) (*membership.Node, error) {
	if !g.enabled() {
		return nil, nil
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	cfg, _, _ := g.config(name)
	if g.listen != "" {
		host, port, _ := net.SplitHostPort(g.listen) // checked
		cfg.BindPort, _ = strconv.Atoi(port)
		cfg.BindAddr = host
	}
	cfg.Meta, cfg.Logger, cfg.SecretKey = meta, log.With("component", "gossip"), g.key
	if meta["role"] != roleGrantor {
		// Only grantors judge a member's silence (discover's suspicion,
		// removal of the dead): heartbeats to the others were n·(n−1)
		// packets a period, and 50 instances saturated two cores.
		cfg.HeartbeatRole = roleGrantor
	}
	if err := cfg.Validate(); err != nil {
		return nil, usageError{err}
	}
	node, err := membership.Start(cfg)
	if err != nil && g.listen != "" {
		// "could not set up network transport", naming no flag (found by
		// an outside client).
		return nil, fmt.Errorf("--gossip-listen %s: %w", g.listen, err)
	}
	return node, err
}

// join joins node, started by bind, to the seeds and keeps it joined; it
// shuts node down if the seeds cannot be reached.
func (g *gossipFlags) join(node *membership.Node, log *slog.Logger) error {
	if len(g.seeds) > 0 {
		if _, err := node.Join(g.seeds); err != nil {
			_ = node.Shutdown()
			// It said only "join failed: … no installed keys could decrypt
			// the message" (or "remote state is encrypted and encryption is
			// not configured"), naming neither flag (found by an outside
			// client).
			hint := ""
			if strings.Contains(err.Error(), "crypt") { // memberlist's words for a key that is not the seeds'
				hint = fmt.Sprintf("; the seeds' gossip key is not this member's (--gossip-key-file or %s): give every member the same key, or none", gossipKeyEnv)
			}
			return fmt.Errorf("--gossip-seeds %s: %w%s", strings.Join(g.seeds, ","), err, hint)
		}
	}
	_, rejoin, _ := g.config(node.Name())
	node.KeepJoined(g.seeds, rejoin) // the seeds may restart: a grantor that was the only one
	log.Info("joined gossip", "node", node.Name(), "addr", node.Addr(), "seeds", g.seeds)
	if other, ok := node.NameConflict(); ok {
		log.Warn("another gossip member has this node's name: gossip keeps its address, and what names this node (registrations) shares its fate; "+
			"give each process a name of its own (unless that member is this node before a restart, which gossip forgets once it is declared dead)",
			"node", node.Name(), "other", other)
	}
	return nil
}

func newRegister(stdout, stderr io.Writer) *cobra.Command {
	var c connFlags
	var mf metricsFlags
	var g gossipFlags
	var addr, node string
	var ttl time.Duration
	var meta []string
	cmd := &cobra.Command{
		Use:   "register SERVICE INSTANCE --addr HOST:PORT",
		Short: "Register a service instance and keep it registered until interrupted",
		Long: `register registers INSTANCE of SERVICE (the lease svc.SERVICE.INSTANCE) with its
address and metadata, keeps it renewed, and deregisters it on SIGINT, SIGHUP or
SIGTERM. If this process dies, the registration lapses by --ttl; with
--gossip-seeds it also joins the grantors' gossip, and if gossip declares it
dead the grantors remove the registration at once (cause "gossip"), usually
within seconds. Exit code 5 if the registration is lost while running.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := parseAttrs("meta", meta)
			if err != nil {
				return err
			}
			if err := c.check(); err != nil {
				return err
			}
			log, _ := newLogger(stderr, c.output, slog.LevelInfo) // -o json: its log lines are JSON objects
			if addr == "" {
				// It said `addr "": want HOST:PORT: missing port in address`.
				return usageError{errors.New("--addr HOST:PORT is required: the instance's address, as discover gives it")}
			}
			reg := api.Registration{Service: args[0], Instance: args[1], Addr: addr, Meta: m}
			if err := reg.Validate(); err != nil {
				return usageError{err}
			}
			switch {
			case g.listen != "" && len(g.seeds) == 0:
				// No grantor would hear of it: a node on the registration
				// that nothing judges (found by an outside client).
				return usageError{errors.New("--gossip-listen needs --gossip-seeds: the gossip address of a grantor (serve --gossip-listen)")}
			case node != "" && !g.enabled():
				return usageError{errors.New("--node names this instance's gossip member: it goes with --gossip-seeds")}
			}
			// As serve does, gossip on or off: a --gossip-profile or a
			// --gossip-key-file it cannot use registered all the same
			// without --gossip-seeds (found by an outside client).
			if err := g.check(); err != nil {
				return err
			}
			if g.enabled() {
				if node == "" {
					node = args[0] + "-" + args[1] + "-" + strconv.Itoa(os.Getpid())
				}
				if err := membership.DefaultConfig(node).Validate(); err != nil {
					// A long instance name made the default too long, which
					// said "invalid config: node name is 130 bytes", once
					// connected, and named no flag (found by an outside
					// client).
					// "Shorter" only when it is too long: a name with a
					// control character was told to be shorter (found by an
					// outside client).
					hint := "give another --node"
					if len(node) > membership.MaxNameLen {
						hint = "give a shorter --node"
					}
					return usageError{fmt.Errorf("--node %q (gossip member name; default SERVICE-INSTANCE-PID): %w: %s", node, err, hint)}
				}
				if g.listen == "" { // as its help says; memberlist's default 7946 is likely a grantor's
					if !loopbackSeeds(g.seeds) {
						// A grantor elsewhere would probe the instance at its
						// own 127.0.0.1 and declare it dead (found by an
						// outside client's reading).
						return usageError{errors.New("--gossip-seeds beyond loopback need --gossip-listen: an address of this host the grantors can reach")}
					}
					g.listen = "127.0.0.1:0"
				}
				reg.Node = node
			}
			brokenPipeIsAnError() // its line written to a closed pipe: deregister, not die registered
			stopMetrics, err := c.startMetrics(cmd.Context(), mf, "leased-register", stderr)
			if err != nil {
				return err
			}
			defer stopMetrics()
			return withClient(cmd, &c, func(ctx context.Context, cl *client.Client) error {
				// Gossip binds its address before the grant, so a taken
				// port fails with nothing registered, and joins once the
				// registration is held: a second process with the same
				// --node that joined first, and left when its grant was
				// refused (held), had the grantors take the node for dead
				// and remove the live instance's registration (both found
				// by outside clients).
				gn, err := g.bind(node, map[string]string{"role": roleInstance, "service": args[0]}, log)
				if err != nil {
					// A second register of a live instance on its fixed
					// --gossip-listen: held (exit 3), as it said before it
					// bound first (found in review).
					if strings.Contains(err.Error(), "address already in use") {
						if rec, gerr := cl.Get(ctx, reg.LeaseName()); gerr == nil {
							return fmt.Errorf("%w (and its --gossip-listen %s is in use): %w", &kvlease.HeldError{Name: rec.Name,
								Holder: rec.Holder, Token: kvlease.Token(rec.Token)}, g.listen, err)
						}
					}
					return err
				}
				if gn != nil {
					defer func() { _ = gn.Leave(time.Second); _ = gn.Shutdown() }()
				}
				gctx, cancel := c.grantContext(ctx)
				k, err := client.Register(gctx, cl, reg, c.holder, ttl, c.keeperOptions()...)
				cancel()
				if err != nil {
					return err
				}
				l := k.Lease()
				if gn != nil {
					if err := g.join(gn, log); err != nil {
						rctx, cancel := cleanupContext(ctx, 5*time.Second)
						defer cancel()
						_ = k.Close(rctx)
						return err
					}
				}
				var werr error
				if p := c.printer(stdout); p.json {
					werr = p.obj(map[string]any{"service": reg.Service, "instance": reg.Instance, "addr": reg.Addr,
						"node": reg.Node, "token": l.Token(), "lease": l.Name()})
				} else {
					node := "" // none without gossip: "node=" said nothing (found by an outside client)
					if reg.Node != "" {
						node = " node=" + field(reg.Node) // --node "web 1" said node=web 1 lease=…
					}
					_, werr = fmt.Fprintf(stdout, "registered %s/%s addr=%s%s lease=%s token=%d\n", reg.Service, reg.Instance, reg.Addr,
						node, l.Name(), l.Token())
				}
				if werr != nil {
					// As acquire --hold: `register … | (exit 0)` was killed
					// by SIGPIPE, registered, and the registration stayed
					// for its TTL with no one renewing it, its restart
					// refused (held) meanwhile (found by an outside client).
					rctx, cancel := cleanupContext(ctx, c.timeout)
					defer cancel()
					if err := k.Close(rctx); err != nil {
						return fmt.Errorf("writing the registration: %w; and deregistering %s failed, so it stays until its TTL lapses: %w",
							werr, l.Name(), permissionCause(ctx, err))
					}
					return fmt.Errorf("writing the registration: %w; deregistered %s", werr, l.Name())
				}
				if lost := keepUntilStop(ctx, k); lost != nil {
					return lost
				}
				lost, err := releaseAfterStop(ctx, k, releaseNotice(log))
				if lost != nil {
					return lost
				}
				return err
			})
		},
	}
	c.register(cmd.Flags())
	mf.register(cmd.Flags())
	c.registerHolder(cmd.Flags())
	g.register(cmd.Flags(), "gossip address host:port of this instance (default: a free port on 127.0.0.1 when --gossip-seeds is given)")
	cmd.Flags().BoolVar(&g.allowInsecure, "allow-insecure", false, "allow --gossip-listen on a non-loopback address without a gossip key: anyone who can reach it can declare members dead")
	cmd.Flags().StringVar(&addr, "addr", "", "the instance's address, host:port (required)")
	cmd.Flags().StringVar(&node, "node", "", "gossip node name (default: SERVICE-INSTANCE-PID)")
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "registration lease duration")
	cmd.Flags().StringArrayVar(&meta, "meta", nil, "metadata key=value (repeatable)")
	return cmd
}

func newDiscover(stdout io.Writer) *cobra.Command {
	var c connFlags
	var maxSuspicion float64
	cmd := &cobra.Command{
		Use:   "discover SERVICE",
		Short: "List the registered instances of a service, with their gossip suspicion levels",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := api.ValidateServiceName("SERVICE", args[0]); err != nil {
				return usageError{err}
			}
			if !(maxSuspicion >= 0) || math.IsInf(maxSuspicion, 1) { // NaN too; +Inf could not be sent (JSON)
				return usageError{fmt.Errorf("--max-suspicion %v: want 0 (keep all) or a positive suspicion level", maxSuspicion)}
			}
			return withClient(cmd, &c, func(ctx context.Context, cl *client.Client) error {
				rep, err := cl.Discover(ctx, args[0], maxSuspicion)
				if errors.Is(err, api.ErrTooLarge) {
					// The reply is too large, not the request (a service
					// name is short): exit 1, not 2, which has a script
					// fix its call (found by a review). The client pages
					// a discovery that does not fit one reply; a service
					// too old to page refuses it so.
					return failedError{fmt.Errorf("the instances of %s do not fit one reply, and the service does not page them: %w", args[0], err)}
				}
				if err != nil {
					return err
				}
				p := c.printer(stdout)
				if p.json {
					p.obj(rep)
					return nil
				}
				tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "INSTANCE\tADDR\tNODE\tSUSPICION\tTOKEN\tEXPIRES IN")
				for _, in := range rep.Instances {
					susp := "-"
					if in.Gossip {
						susp = strconv.FormatFloat(in.Suspicion, 'f', 1, 64)
						if in.Suspect {
							susp += " (suspect)"
						}
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\n", in.Instance, textSafe(in.Addr), field(in.Node), susp, in.Token,
						time.Until(in.ExpiresAt).Round(100*time.Millisecond))
				}
				return tw.Flush()
			})
		},
	}
	c.register(cmd.Flags())
	// One object, not one a line: the instances and the threshold they
	// were judged by (the shared help said one per row: found by an
	// outside client).
	cmd.Flags().Lookup("output").Usage = `output format: text or json (one JSON object: {"instances":[…],"threshold":…})`
	cmd.Flags().Float64Var(&maxSuspicion, "max-suspicion", 0, "leave out instances whose suspicion is at or above this (0: keep all)")
	return cmd
}
