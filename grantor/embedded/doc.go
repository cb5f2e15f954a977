// Package embedded runs a nats-server with JetStream inside the current
// process, alone or as a member of a JetStream cluster ([Config.ClusterName],
// [Config.Routes]). It is what `leased serve` starts by default. Tests start
// nats-server through [github.com/leased/leased/kvlease/kvleasetest] instead.
//
// # Durability
//
// JetStream's file store acknowledges a write before it reaches the disk and
// fsyncs every two minutes by default. For a lease store that means a
// revision, which is a fencing token, can be handed out twice after a power
// loss. This package therefore defaults to [SyncAlways]: every write is synced
// before it is acknowledged. [UnsafeSyncInterval] restores JetStream's lazy
// default and is named for what it risks.
//
// # One server per data directory
//
// [Start] takes an exclusive lock (flock(2)) on the file leased.lock in the
// data directory before the server opens its store, and writes its process
// id into it. A second server on the same directory fails at once with
// [ErrLocked]: two servers on one store would each grant from their own copy
// and hand out one fencing token twice. The lock is released by
// [Server.Shutdown], and by the kernel when the process exits, however it
// exits. Once it runs, a server names itself in the directory's
// [InstanceFile] ([Server.Instance]) and knows the name of the process
// before it there ([Server.Predecessor]), which the lock says has stopped.
//
// # Security
//
// [Config.Base] takes nats-server options loaded from a standard nats-server
// configuration file ([LoadConfigFile]): TLS, users, accounts, cluster TLS
// and authorization are NATS's own. [Start] refuses to listen for clients,
// routes or gateways on an address other than loopback unless that
// listener requires authentication ([ErrInsecure]; a no_auth_user lets
// clients in without it), or [Config.AllowInsecure] is set: anyone who can
// reach an open client port can write the lease bucket directly, taking or
// ending any lease without its secret.
//
// # What it does not do
//
// It checks only the client, route and gateway listeners: other listeners a
// configuration file may add (http monitoring, websocket, leaf nodes,
// MQTT) are not checked, and must be secured in the file. It knows
// nothing of leases: the lease bucket is [github.com/leased/leased/kvlease]'s,
// which creates it with history 1 and per-key TTLs. Syncing before every
// acknowledgement protects what was acknowledged against a crash of this
// machine; how many machines hold a write is the bucket's replication,
// not this package's.
package embedded
