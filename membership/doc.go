// Package membership keeps a cluster's member list with
// [hashicorp/memberlist] gossip and adds to memberlist's verdicts (alive,
// dead, left) a continuous suspicion level per member, events, and probe
// round-trip samples.
//
// A [Node] is one member. [Start] binds the gossip port, [Node.Join] joins a
// cluster through seed addresses, [Node.Members] lists every member with its
// metadata, state and suspicion, and [Node.Events] reports changes.
// [Node.Leave] departs gracefully; [Node.Shutdown] stops everything.
//
//	n, err := membership.Start(membership.DefaultConfig("grantor-1"))
//	…
//	defer n.Shutdown()
//	if _, err := n.Join([]string{"10.0.0.2:7946"}); err != nil { … }
//	for ev := range n.Events() {
//		if ev.Type == membership.EventDead { … }
//	}
//
// # Suspicion
//
// memberlist's failure detector is binary and slow on purpose: a node that
// stops answering probes is suspected internally, but [memberlist.Memberlist.Members]
// still reports it as alive and no callback fires, until it is declared dead
// several seconds later (about 4–5 s with the LAN profile). This package
// adds a phi-accrual failure detector (Hayashibara et al., 2004) that says,
// continuously, how implausible a member's current silence is.
//
// Every member sends a small heartbeat to every other member each
// HeartbeatInterval. For each sender, the receiver keeps the last 100
// inter-arrival times and computes
//
//	phi(t) = −log10(1 − F(t − last))
//
// where last is the arrival of the last heartbeat and F is the normal CDF
// with the window's mean μ and standard deviation max(σ, μ/4, floor) (floor:
// 100 ms LAN, 50 ms test). phi = 8 means a silence that long happens by
// chance once in 10⁸; it is reached after about μ + 5.6·σ. Until 4 intervals
// have been measured, μ is the sender's declared interval (gossiped in its
// metadata) and σ = max(μ/4, floor). Before the first heartbeat after a join
// σ is 2μ: the first heartbeat may lag the join by a few gossip rounds, so a
// new member is suspected only after about 12 of its intervals.
//
// [Member.Suspicion] is that phi, capped at MaxSuspicion/10, and divided by
// 1 + [Node.LocalHealth] when memberlist's health score for the local node
// is above zero: a node that is itself slow (missing acks, refuting
// suspicions) should not trust its own judgement of others, the idea of
// Lifeguard (Dadgar et al., 2018). When memberlist declares a member dead,
// or it leaves, its suspicion is exactly [MaxSuspicion] and stays so until
// it rejoins, which starts a fresh history.
//
// A member whose suspicion reaches Config.PhiThreshold (default 8) while
// memberlist still counts it as alive has [StateSuspect], and
// [EventSuspect] is sent; [EventRecover] when it falls below again, which
// usually happens the moment a heartbeat arrives. Suspicion is evaluated
// every HeartbeatInterval/2 and on every heartbeat.
//
// # Timing
//
// With steady heartbeats on a quiet network σ sits at its floor, and a
// silent member becomes suspect after μ + 5.6·max(μ/4, floor) of silence:
// about 1.2 s with the LAN profile (500 ms heartbeats) and 0.4 s with the
// test profile (100 ms heartbeats, floor 50 ms), plus up to half an interval
// until the next evaluation. That is well before memberlist declares it dead
// (LAN: a probe round plus 4–5 s; test: about 1–1.5 s after it stopped). Jittery
// senders widen σ and delay suspicion; a long pause that ends is itself
// recorded as an interval and makes the detector more lenient for the next
// 100 heartbeats.
//
// # Cost and scale
//
// Heartbeats are sent point to point over UDP with memberlist's
// SendBestEffort, so a cluster of n members sends n·(n−1) packets of a few
// dozen bytes per interval: meant for clusters of tens of members, not
// thousands. Members that only a few need to judge (service instances, by
// their grantors) set [Config.HeartbeatRole]: they heartbeat only the
// members of that role, n·k packets for k such members, and the others do
// not judge their silence. Lost heartbeats look like lateness; the window
// absorbs occasional loss.
//
// # Events
//
// Events concern the other members, never the local node, and arrive in
// the order they were observed. memberlist's goroutines never wait for the
// reader: events queue up to [EventQueueSize]; beyond that the oldest event
// other than [EventDead] and [EventLeave] is dropped and counted by
// [Node.Dropped]. Dead and Leave are never dropped. The channel is closed
// by Shutdown.
//
// memberlist reports deaths and departures through the same callback. To
// tell them apart, [Node.Leave] first sends each member a UDP announcement;
// a member that misses it reports [EventDead] for a node that actually
// left. Both mean the node is gone. Because memberlist may handle the
// announcement just after its own verdict, EventDead is held back until the
// first evaluation at least 25 ms after the verdict.
//
// # Gossip-only members
//
// A process that wants to be a gossip member only (to be seen, to watch the
// membership, or to carry metadata such as a NATS URL) runs this package
// too: [Start] with its own unique Name, a role in Meta and the cluster's
// Profile, then [Node.Join] any member, and Leave and Shutdown on exit. A
// member that runs plain memberlist instead is listed with nil Meta and
// suspicion 0 while memberlist counts it alive: it sends no heartbeats, so
// only memberlist's dead and left verdicts apply to it.
//
// # What it does not do
//
// Membership is advisory. Suspicion is one node's opinion from its own
// vantage point; two nodes may disagree, and a dead verdict may be reversed
// when the node refutes it ([EventJoin] again). Nothing here is a lease or a
// lock: decisions that need exclusivity go through kvlease and its fencing
// tokens. Gossip is encrypted and authenticated only with a
// [Config.SecretKey] shared by every member; without one, bind to loopback
// or a network you trust (anyone who reaches the port can declare any
// member dead). Clocks are only compared in [Node.ClockOffset], as an
// estimate.
//
// [hashicorp/memberlist]: https://github.com/hashicorp/memberlist
package membership
