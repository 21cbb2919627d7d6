// Package process is the process provisioner: it runs each cluster's data
// plane as local processes of the magnetar binary, for development, tests
// and single-machine regions.
//
// Layout. A cluster "organizations/{org}/clusters/{c}" lives in
// <DataDir>/clusters/<org>-<c>/:
//
//	state.json      the cluster's record (below), rewritten atomically
//	                (state.json.tmp + rename) after every change
//	metadata/       `magnetar metadata` data (a single-member etcd)
//	bookie-<i>/     `magnetar bookie` i's data
//	<role>-<i>.log  stdout and stderr of each process (appended)
//	tls/            ca.pem (the region CA's certificate: the trust file)
//	                and <role>-<i>.pem, <role>-<i>-key.pem (0600) of each
//	                process, unless Config.InsecureDataPlanes
//
// state.json holds the full resource name, the size and revision being
// applied, and for each process its role, index, loopback addresses
// (chosen once from free ports, so a restarted process keeps them), its
// argument list and its PID.
//
// Processes run in their own process group and are not tied to the
// provisioner's lifetime: when the agent stops or crashes they keep
// serving (static stability). A new Provisioner on the same DataDir adopts
// the processes that are still alive (a PID is adopted only when
// /proc/<pid>/cmdline carries the recorded arguments) and restarts the
// others. A supervisor goroutine checks every CheckInterval and replaces
// crashed processes with exponential backoff; after maxRestarts failed
// restarts in a row the cluster reports FAILED (and restarts continue at
// the longest backoff).
//
// Scaling down stops the highest-numbered brokers or bookies. A bookie is
// NOT drained first: the ledger copies it held are lost with its directory,
// and ledgers written with fewer copies than the bookies removed lose
// data. Delete stops every process (SIGTERM to its process group, SIGKILL
// after StopGrace) and removes the cluster's directory. Processes are
// stopped brokers first, then bookies, then the metadata store (each role
// gone before the next is signalled), so every process shuts down while
// what it depends on still serves; StopAll stops the clusters at once.
//
// Brokers are started with ensemble = write quorum = min(3, bookies) and
// ack quorum = min(2, bookies), and are restarted when a bookie count
// change alters those flags.
//
// Tiered storage (Config.Offload): every cluster's brokers offload to the
// one bucket, each cluster under the key prefix
// "<Offload.Prefix><org>/<cluster>/" (--managed-ledger-offload-prefix), so
// clusters never see each other's objects; the credentials are passed in
// the brokers' environment. Namespaces still choose when to offload
// (offload policies).
//
// TLS (unless Config.InsecureDataPlanes). On first use the provisioner
// creates a CA under <DataDir>/ca (package pki: ca.pem, ca-key.pem 0600;
// ECDSA P-256, 10 years) and loads it afterwards. Before a process starts,
// and at every supervisor pass, it makes sure the process has a
// certificate of that CA (server and client usage; SANs 127.0.0.1, ::1,
// localhost and the hosts of its addresses; 90 days) with more than 30
// days left, issuing a new one in place otherwise: the processes re-read
// their files, so renewal needs no restart, and certificates of another
// CA (after the CA was replaced) are re-issued. The metadata member serves
// clients and peers over https:// and requires client certificates of
// the CA; bookies serve TLS only and require them too; brokers and
// bookies present theirs on those links. Brokers also serve
// pulsar+ssl:// (TLSAddr) and https:// (HTTPSAddr) beside the plain
// listeners, without asking clients for a certificate; Status reports
// those URLs and the CA's certificate. Switching InsecureDataPlanes
// changes every process's arguments, which restarts them (data and
// addresses are kept).
//
// Callers: the region agent (through provisioner.Provisioner) and
// `magnetar up`. Concurrency: all methods are safe for concurrent use.
// Lock order: cluster.mu, then Provisioner.mu (Delete), and caMu last
// (taken alone or under a cluster.mu); Provisioner.mu is
// never held while taking a cluster.mu, nor while processes are started,
// stopped or probed. One cluster's work (which may wait up to StopGrace)
// never blocks another's.
package process
