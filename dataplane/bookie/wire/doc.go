// Package wire is the framed, pipelined protocol between ledger clients and
// bookies: the frame format, its encoder and decoder, and a client connection.
package wire
