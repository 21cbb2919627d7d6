// Package storetest is the conformance suite for store.Store. Every backend
// (sqlstore over SQLite in memory and in a file, and over PostgreSQL) runs
// it from its own tests:
//
//	storetest.Run(t, func(t *testing.T) store.Store { ... a fresh, empty store ... })
//	storetest.RunDurable(t, func(t *testing.T) storetest.Reopener { ... })
//
// Run checks the contract documented in package store: create, get,
// update and delete, etags, UIDs, request-id idempotency, list filters and
// pagination (including a walk while another goroutine writes), counts,
// the change log, audit events, transactions (commit, rollback,
// concurrent read-modify-write with no lost update) and Close. RunDurable
// checks that everything survives Close and re-open, and that re-opening
// is idempotent.
//
// The suite's goroutines are started and waited for inside each subtest.
// Subtests do not run in parallel; each gets its own store.
package storetest
