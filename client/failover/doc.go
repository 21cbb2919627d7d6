// Package failover gives users of the Apache Pulsar Go client
// (github.com/apache/pulsar-client-go, which has no cluster-level failover:
// apache/pulsar-client-go#929) what the Java client's
// ControlledClusterFailover and AutoClusterFailover give Java users: a
// client that moves its producers and consumers to another cluster while
// the caller keeps the same handles.
//
// Two ways to decide the cluster:
//
//   - Controlled (NewControlled): poll an HTTP endpoint that answers the
//     JSON the Java client's ControlledClusterFailover reads,
//     {"serviceUrl", "tlsTrustCertsFilePath", "authPluginClassName",
//     "authParamsString"}, every CheckInterval; a different answer is a
//     switch. Magnetar's control plane and region agents serve such an
//     endpoint per replication group; any other server works too.
//   - Automatic (NewAutomatic): probe the primary (a TCP connection to its
//     service URL, as AutoClusterFailover does) every CheckInterval; once it
//     has failed for FailoverDelay, switch to the first healthy secondary;
//     once the primary has been healthy again for SwitchBackDelay, switch
//     back. The decisions are a pure function of probe results and time
//     (decide), tested on their own.
//
// A switch creates a pulsar.Client for the new cluster, creates every
// producer and consumer there again with the options they were created
// with, swaps each under its handle once its successor exists, and then
// closes the old one (waiting at most 2 s; an unreachable cluster's close
// goes on in the background). One the new cluster refuses for now (still
// fenced, say) keeps working on the old cluster and is tried again at every
// check. One refused because its producer name or exclusive subscription is
// taken there stays as it is: its topic migrated (PIP-188) and took it to
// the new cluster already (unless an unused old client of that cluster is
// still open: it is closed, and the successor tried again at the next
// check). The old cluster's pulsar.Client is closed once no handle has used
// it for 2 × OperationTimeout + ConnectionTimeout (71 s with the defaults):
// pulsar-client-go may complete a closed producer's reconnection when its
// cluster returns, and that ghost goes only with its client's connections.
// Consumers should use a replicated subscription (ReplicateSubscriptionState)
// on a geo-replicated topic, so the new cluster knows what was
// acknowledged.
//
// Sends in flight at a switch: Producer.Send and SendAsync retry a send
// that failed on the old cluster on the new one (up to MaxSwitchRetries
// times), and otherwise return the error: a send is never dropped silently.
// A send that failed on the old cluster may still have been stored there
// (and replicated): across a switch delivery is at least once, as with the
// Java client. Messages received from the old cluster are acknowledged
// there (Message keeps its consumer); if that cluster is gone the
// acknowledgement fails and the message comes again from the new one.
//
// Concurrency: every method of Client, Producer and Consumer is safe for
// concurrent use. Client owns one goroutine (the provider's loop) and one
// per consumer (the pump from the current underlying consumer); Close stops
// them and waits.
package failover
