// Package memstorage is an in-memory storage.Storage: the full contract of
// the bookie's ledger storage (fencing, recovery adds, read-only mode,
// deletion, close) without durability. Tests of the bookie server and of
// ledger clients use it; the disk implementation lives in package storage.
//
// All methods are safe for concurrent use. AddEntry and Fence call done
// synchronously, after releasing the storage's lock, on the caller's
// goroutine.
package memstorage
