// Package membership will wrap hashicorp/memberlist: join and leave, a
// continuous suspicion level per node, events, and probe round-trip samples
// (issue 5). Nothing here yet.
package membership
