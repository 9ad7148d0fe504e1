package keyspace

// The prefixes of the names dlock derives from a lock key (Derive): no
// braces, so they never affect slots. Names differ only in prefix:
// release.lua swaps Notify's for Wake's to get the wake channel (tested).
const (
	FencePrefix   = "dlock:fence:"   // fencing counter: the last fence issued for the key
	WakePrefix    = "dlock:wake:"    // pub/sub channel: releases and hand-offs of the key
	NotifyPrefix  = "dlock:notify:"  // exists while someone waits for the wake channel's "released"
	QueuePrefix   = "dlock:queue:"   // wait queue: waiter ids by the server time they queued
	WaitersPrefix = "dlock:waiters:" // waiters, their groups' signs of life, the last grant
	HoldersPrefix = "dlock:holders:" // the fences of a semaphore's or read-write lock's holders
	OwnerPrefix   = "dlock:owner:"   // the holders' owner records (WithOwner)
	ElectPrefix   = "dlock:elect:"   // pub/sub channel: an election's announcements
)

// Fence returns the name of key's fencing counter.
func Fence(key string) string { return Derive(FencePrefix, key) }

// Wake returns the channel of key's releases and hand-offs.
func Wake(key string) string { return Derive(WakePrefix, key) }

// Notify returns the key saying someone listens on Wake(key).
func Notify(key string) string { return Derive(NotifyPrefix, key) }

// Queue returns key's wait queue.
func Queue(key string) string { return Derive(QueuePrefix, key) }

// Waiters returns the hash of key's waiters' data.
func Waiters(key string) string { return Derive(WaitersPrefix, key) }

// Holders returns the hash of key's shared holders' fences.
func Holders(key string) string { return Derive(HoldersPrefix, key) }

// Owner returns the hash of key's owner records.
func Owner(key string) string { return Derive(OwnerPrefix, key) }

// Elect returns the channel of the election on key.
func Elect(key string) string { return Derive(ElectPrefix, key) }

// RevokedPrefix names the hash of a key's revoked holds: token -> why
// (Client.Revoke); renewals of a token in it are refused.
const RevokedPrefix = "dlock:revoked:"

// Revoked returns the hash of key's revoked holds.
func Revoked(key string) string { return Derive(RevokedPrefix, key) }

// Audit is the stream of revocations: who, when, why, which hold. It has
// no hash tag: one stream per node, written beside the key's (a Cluster's
// lands in its own slot).
const Audit = "dlock:audit"
