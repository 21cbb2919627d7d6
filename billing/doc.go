// Package billing is the pure core of Magnetar's usage billing: meters,
// hourly roll-up of broker counters with deterministic idempotency keys,
// rating of usage against a price book, and the invoice state machine.
// Nothing here does I/O or reads the clock: callers pass time in.
//
// # Meters
//
// A meter is a named quantity with a unit (Meters lists them). Counter
// meters (messages and bytes in and out, bytes replicated out, function
// instance-seconds) are sums of
// the increments of the brokers' monotonic counters observed in the hour;
// gauge meters (storage bytes, topics, partitions, brokers, bookies) are the
// peak sampled in the hour, so a partial hour counts as a full one.
//
// # Roll-up (region agent)
//
// Rollup turns scrapes of broker counters into hourly totals keyed
// (organization, cluster, meter, hour). A scrape carries the broker
// process's epoch: the same epoch as the last scrape yields the difference of
// the counters, a new epoch (the broker restarted, its counters start at
// zero) yields the new values themselves, so a restart is never counted
// twice. An increment is attributed to the UTC hour of the scrape that
// observed it. Each hourly total carries a revision that grows whenever it
// changes; records are sent as totals, not deltas, under the key's
// deterministic IdempotencyKey, so re-sending (after a crash or while the
// control plane was down) never adds. Rollup is a value: the agent persists
// it whole (Marshal) after every scrape, before it sends anything.
//
// # Ingestion (control plane)
//
// Ingest decides what a received total does to the stored state of its key:
// nothing (a revision already seen), an update of the hour's usage (the
// hour's billing period is open), or an adjustment record carrying the
// difference into the period open at arrival (late data for a closed
// period, whose invoice never changes again).
//
// # Rating and rounding
//
// Rate is a pure function from usage quantities and a PriceBook to line
// items, in exact rational arithmetic (math/big.Rat): quantities are summed
// per (region, meter) first, converted to the price's unit exactly, free
// allowances subtracted, and tiers applied in order (graduated: each tier
// prices only the units that fall inside it). The one rounding rule: each
// line item's amount is rounded once, to the currency's minor unit (two
// decimal places), half to even; an invoice's total is the sum of its
// rounded line items, so the line items always add up to the total.
//
// # Invoices
//
// An invoice covers one organization and one calendar month (UTC). It is
// DRAFT while the month is open and until the grace period after it has
// passed, then FINALIZED, after which it never changes; corrections are
// credit notes, separate documents referring to a finalized invoice.
//
// # Budgets
//
// Budget.Evaluate compares a month's spending with a budget's amount and
// alert thresholds and says which thresholds are newly reached (each is
// alerted once a month).
//
// UsageReport (report.go) is the JSON a broker serves at
// GET /magnetar/v1/usage; Samples turns it into roll-up samples: one of
// the broker process (its epoch) and one per durable counter of a topic
// (Sample.Durable: the highest value of an epoch counts, so a recount after
// a crash or a stale report of a previous owner adds nothing).
//
// Concurrency: values and pure functions; a Rollup is not safe for
// concurrent use.
package billing
