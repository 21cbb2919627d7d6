// Package state is the client of the Magnetar functions worker's state API,
// which backs the state methods of pf.FunctionContext (Pulsar's Go SDK has
// no state).
//
// The API is plain HTTP under the worker's stateStorageServiceUrl, keys
// scoped to one function, every path segment escaped with url.PathEscape:
//
//	GET    {base}/magnetar/v1/functions/{tenant}/{namespace}/{name}/state/{key}    200 raw bytes | 404 absent
//	PUT    .../state/{key}    body raw bytes                                       204
//	DELETE .../state/{key}                                                         204
//	POST   .../counter/{key}  body {"delta": N}                                    200 {"value": <new value>}
//	GET    .../counter/{key}                                                       200 {"value": N} (0 when absent)
//
// Any other status is an *Error carrying the answer's {"reason": ...}. When
// the instance configuration carries a token, every request has
// "Authorization: Bearer <token>".
//
// A Client is safe for concurrent use; each call is one HTTP request bounded
// by its context (30 s when the context has no deadline).
package state
