// Package table owns the benchmarks' result tables: a header and rows of
// cells, rendered as aligned text for a terminal or as a Markdown table.
//
// Callers: the commands under bench/ (ledgerbench, streambench).
//
// Concurrency: a Table is a plain value; not safe for concurrent mutation.
package table
