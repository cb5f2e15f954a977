package membership

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
)

// Profile selects memberlist's timing and this package's detector floors.
type Profile int

const (
	// ProfileLAN is memberlist's DefaultLANConfig: 1 s probes, 500 ms probe
	// timeout, a dead node declared about 4–5 s after it is first suspected
	// (SuspicionMult 4 · max(1, log10 n) · 1 s). Lifeguard is on: its
	// awareness and suspicion multipliers lengthen detection while this
	// node misses acks, so with few members, several that die together
	// are declared dead 11–26 s later, or not before their registrations
	// lapse (measured by an outside client). Detector floor: 100 ms. As in
	// the other profiles, a member dead for a second gives its name to a
	// node on another address (memberlist's DeadNodeReclaimTime, 0 in
	// DefaultLANConfig).
	ProfileLAN Profile = iota
	// ProfileTest is for tests on 127.0.0.1: 100 ms probes, 50 ms probe
	// timeout, 50 ms gossip, suspicion timeout 8 · max(1, log10 n) · 100 ms
	// (0.8 s below ten nodes), so a killed node is declared dead about 1–1.5
	// s after it stops, under 3 s even under the race detector. Detector
	// floor: 50 ms.
	ProfileTest
	// ProfileFast is for loopback demos and process tests that must see
	// suspicion well before death: heartbeats every 100 ms (a silent node
	// is suspect after about 0.4 s), 250 ms probes with a 100 ms timeout and
	// a flat 2.5 s suspicion timeout (SuspicionMult 10 · 250 ms, no
	// lengthening), so a killed node is declared dead about 2.6–3.2 s after
	// it stops. Detector floor: 50 ms.
	ProfileFast
)

func (p Profile) String() string {
	switch p {
	case ProfileLAN:
		return "lan"
	case ProfileTest:
		return "test"
	case ProfileFast:
		return "fast"
	}
	return fmt.Sprintf("Profile(%d)", int(p))
}

// profileParams are the parts of a profile that are not in [Config].
type profileParams struct {
	heartbeat time.Duration // default HeartbeatInterval
	minStdDev time.Duration // floor on the detector's standard deviation
	retention time.Duration // default DeadRetention
	port      int           // default BindPort
	tune      func(*memberlist.Config)
}

func (p Profile) params() (profileParams, bool) {
	switch p {
	case ProfileLAN:
		return profileParams{
			heartbeat: 500 * time.Millisecond,
			minStdDev: 100 * time.Millisecond,
			retention: 5 * time.Minute,
			port:      DefaultPort,
			tune: func(c *memberlist.Config) {
				// DefaultLANConfig's timing as is, but a dead member's name
				// goes to a node on another address, as in the other
				// profiles: memberlist's default never let it (a restarted
				// `leased register --node NAME`, on a free port, was
				// ignored as a conflict and listed dead until the old
				// member was forgotten: 50 s; found by an outside client).
				c.DeadNodeReclaimTime = time.Second
			},
		}, true
	case ProfileTest:
		return profileParams{
			heartbeat: 100 * time.Millisecond,
			minStdDev: 50 * time.Millisecond,
			retention: 30 * time.Second,
			port:      0,
			tune: func(c *memberlist.Config) {
				c.TCPTimeout = time.Second
				c.IndirectChecks = 2
				c.RetransmitMult = 3
				c.SuspicionMult = 8
				c.SuspicionMaxTimeoutMult = 3
				c.PushPullInterval = time.Second
				c.ProbeInterval = 100 * time.Millisecond
				c.ProbeTimeout = 50 * time.Millisecond
				c.GossipInterval = 50 * time.Millisecond
				c.GossipToTheDeadTime = 2 * time.Second
				c.DeadNodeReclaimTime = time.Second
			},
		}, true
	case ProfileFast:
		return profileParams{
			heartbeat: 100 * time.Millisecond,
			minStdDev: 50 * time.Millisecond,
			retention: 30 * time.Second,
			port:      0,
			tune: func(c *memberlist.Config) {
				c.TCPTimeout = time.Second
				c.ProbeInterval = 250 * time.Millisecond
				c.ProbeTimeout = 100 * time.Millisecond
				c.SuspicionMult = 10
				c.SuspicionMaxTimeoutMult = 1
				// Lifeguard's awareness stretches probe intervals while the
				// local node misses acks, and with few members a dead one
				// keeps it missing them: detection times then grow with
				// each death (measured: 2.6 s, 3.6 s, 4.4 s). Fixed timing
				// is what this profile promises; this package's own
				// suspicion discount still applies.
				c.AwarenessMaxMultiplier = 1
				c.GossipInterval = 100 * time.Millisecond
				c.PushPullInterval = 5 * time.Second
				c.GossipToTheDeadTime = 5 * time.Second
				c.DeadNodeReclaimTime = time.Second
			},
		}, true
	}
	return profileParams{}, false
}

const (
	// DefaultPort is the LAN profile's gossip port (TCP and UDP), the same
	// as memberlist's and Serf's.
	DefaultPort = 7946
	// DefaultPhiThreshold is the suspicion level at which a member counts
	// as suspect: phi = 8 means the silence so far would, under the
	// observed heartbeat distribution, happen by chance once in 10⁸ —
	// about mean + 5.6 standard deviations. It is the value Akka and
	// Cassandra use.
	DefaultPhiThreshold = 8.0
	// MaxNameLen is the longest node name accepted, in bytes.
	MaxNameLen = 128
	// MaxMetaSize is the size limit of a node's encoded metadata: memberlist
	// gossips at most 512 bytes per node. The encoding takes the keys and
	// values plus one or two bytes of length per key and per value, plus a
	// header of up to ten bytes.
	MaxMetaSize = memberlist.MetaMaxSize
	// DefaultLeaveTimeout is used by [Node.Leave] and [Node.UpdateMeta]
	// when they are given a timeout ≤ 0.
	DefaultLeaveTimeout = 5 * time.Second
)

// Config configures [Start]. Build it with [DefaultConfig] or [TestConfig]
// and change what you need; the zero Config is not valid.
type Config struct {
	// Name identifies the node; it must be unique in the cluster. Required;
	// at most MaxNameLen bytes of printable UTF-8.
	Name string

	// BindAddr is the IP address gossip listens on (TCP and UDP). Default
	// "127.0.0.1" so that a default node is never reachable from outside;
	// set a LAN address, or "0.0.0.0" to listen everywhere (memberlist then
	// advertises a private address of this host).
	BindAddr string
	// BindPort is the gossip port. 0 picks a free port; [Node.Addr] tells
	// which. Default: DefaultPort for ProfileLAN, 0 for ProfileTest.
	BindPort int

	// AdvertiseAddr and AdvertisePort are the address other members use to
	// reach this node, when it is not the bound one (NAT, containers).
	// Optional; AdvertisePort defaults to the bound port.
	AdvertiseAddr string
	AdvertisePort int

	// Meta is gossiped to every member and shows up in their [Member.Meta]
	// (for example "nats_url", "version", "role"). Encoded, it must fit in
	// MaxMetaSize bytes. Change it later with [Node.UpdateMeta].
	Meta map[string]string

	// Profile selects memberlist's timing. Default ProfileLAN.
	Profile Profile

	// HeartbeatInterval is how often this node sends a heartbeat to every
	// other member. Default by profile: 500 ms (LAN), 100 ms (test). The
	// detector evaluates suspicion every HeartbeatInterval/2. Between 10 ms
	// and 1 min.
	HeartbeatInterval time.Duration

	// HeartbeatRole, if set, sends this node's heartbeats only to the
	// members whose Meta["role"] is HeartbeatRole, and says so in its
	// metadata: the members of other roles do not judge its silence (they
	// list it at suspicion 0, as a plain memberlist member), those of that
	// role judge it as any other. Members that only need to be judged by
	// a few (service instances, by their grantors) so cost n·k heartbeats,
	// not n·(n−1): 50 instances heartbeating each other saturated two
	// cores (found by an outside client).
	HeartbeatRole string

	// PhiThreshold is the suspicion level at which a member counts as
	// suspect (see [DefaultPhiThreshold]). Positive, finite, below
	// MaxSuspicion/10.
	PhiThreshold float64

	// DeadRetention is how long a dead or departed member stays in
	// [Node.Members] (as StateDead or StateLeft, Suspicion MaxSuspicion)
	// before it is forgotten. Default by profile: 5 min (LAN), 30 s (test).
	// Zero forgets it at the next evaluation.
	DeadRetention time.Duration

	// SecretKey, if set, encrypts and authenticates every gossip message
	// and stream (memberlist's AES-GCM keyring): a member without the key
	// can neither read the gossip nor speak in it. 16, 24 or 32 bytes; every
	// member needs the same. Nil: plaintext and unauthenticated, and anyone
	// who can reach the port can declare any member dead (one UDP packet
	// did, ending a registration; found by an outside client), so bind
	// such a node to loopback or a network you trust.
	SecretKey []byte

	// Logger receives this package's logs and memberlist's, which are
	// bridged through [slog.NewLogLogger] at Debug level. Default: discard.
	Logger *slog.Logger
}

// DefaultConfig returns a Config for a LAN deployment with the given node
// name: listen on 127.0.0.1:7946 (change BindAddr to be reachable),
// heartbeats every 500 ms, suspect at phi 8, forget the dead after 5 min.
func DefaultConfig(name string) Config {
	return configFor(name, ProfileLAN)
}

// TestConfig returns a Config for tests: ProfileTest on 127.0.0.1 with a
// free port, heartbeats every 100 ms, suspect at phi 8, forget the dead after
// 30 s.
func TestConfig(name string) Config {
	return configFor(name, ProfileTest)
}

// ProfileConfig returns the Config of profile p for the named node (on
// 127.0.0.1, with the profile's port, heartbeat and retention).
func ProfileConfig(name string, p Profile) Config { return configFor(name, p) }

func configFor(name string, p Profile) Config {
	pp, _ := p.params()
	return Config{
		Name:              name,
		BindAddr:          "127.0.0.1",
		BindPort:          pp.port,
		Profile:           p,
		HeartbeatInterval: pp.heartbeat,
		PhiThreshold:      DefaultPhiThreshold,
		DeadRetention:     pp.retention,
	}
}

// Validate checks every field and how they relate. Errors wrap [ErrConfig]
// (and [ErrMeta] for metadata).
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if err := validateName(c.Name); err != nil {
		return bad("%v", err)
	}
	if net.ParseIP(c.BindAddr) == nil {
		return bad("bind address %q is not an IP address", c.BindAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return bad("bind port %d outside 0..65535", c.BindPort)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return bad("advertise address %q is not an IP address", c.AdvertiseAddr)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return bad("advertise port %d outside 0..65535", c.AdvertisePort)
	}
	if c.AdvertisePort != 0 && c.AdvertiseAddr == "" {
		return bad("advertise port %d without an advertise address", c.AdvertisePort)
	}
	if _, ok := c.Profile.params(); !ok {
		return bad("unknown profile %v", c.Profile)
	}
	if c.HeartbeatInterval < 10*time.Millisecond || c.HeartbeatInterval > time.Minute {
		return bad("heartbeat interval %v outside 10ms..1m", c.HeartbeatInterval)
	}
	if !(c.PhiThreshold > 0) || math.IsInf(c.PhiThreshold, 0) || c.PhiThreshold >= detectorCap {
		return bad("phi threshold %g outside (0, %g)", c.PhiThreshold, float64(detectorCap))
	}
	if c.DeadRetention < 0 {
		return bad("negative dead retention %v", c.DeadRetention)
	}
	if _, err := encodeMeta(c.Meta, c.HeartbeatInterval, c.HeartbeatRole); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if n := len(c.SecretKey); c.SecretKey != nil && n != 16 && n != 24 && n != 32 {
		return bad("secret key of %d bytes, want 16, 24 or 32 (AES-128, -192 or -256)", n)
	}
	return nil
}

func validateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty node name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("node name is %d bytes, longer than %d", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("node name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("node name %q contains an unprintable character", name)
		}
	}
	return nil
}

// memberlistConfig builds memberlist's configuration from a valid Config.
func (c Config) memberlistConfig(logger *slog.Logger) *memberlist.Config {
	pp, _ := c.Profile.params()
	mc := memberlist.DefaultLANConfig()
	pp.tune(mc)
	mc.Name = c.Name
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if c.AdvertisePort == 0 {
		// memberlist advertises this port only with an AdvertiseAddr; with
		// BindPort 0 it replaces it with the port it bound.
		mc.AdvertisePort = c.BindPort
	}
	mc.SecretKey = c.SecretKey // memberlist then sends and accepts only encrypted messages
	mc.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	mc.LogOutput = nil
	return mc
}
