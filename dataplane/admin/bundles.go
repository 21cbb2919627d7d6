package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/bundle"
)

// Cluster-aware admin operations: lookups, namespace bundles and their
// unload and split. A request about a bundle another broker owns is
// redirected there (307, as Pulsar does), so any broker can be asked.

// lookup serves /lookup/v2/topic/{domain}/{t}/{ns}/{topic}[/bundle].
func (h *Handler) lookup(q *request) error {
	if q.r.Method != http.MethodGet || len(q.seg) < 4 || len(q.seg) > 5 || (len(q.seg) == 5 && q.seg[4] != "bundle") {
		return errNotFound
	}
	tn, err := h.topicName(q, broker.Domain(q.seg[0]), q.seg[1], q.seg[2], q.seg[3])
	if err != nil {
		return err
	}
	if err := h.checkNamespace(q, tn.Tenant, tn.Namespace); err != nil {
		return err
	}
	if len(q.seg) == 5 {
		b, err := h.svc.NamespaceBundles(q.ctx, tn.Tenant, tn.Namespace)
		if err != nil {
			return err
		}
		q.w.Header().Set("Content-Type", "text/plain")
		q.w.WriteHeader(http.StatusOK)
		q.w.Write([]byte(b.Find(bundle.Hash(tn.String())).String()))
		return nil
	}
	res, err := h.svc.Lookup(q.ctx, tn.String(), q.queryBool("authoritative"))
	if err != nil {
		return err
	}
	if res.Redirect {
		return h.redirect(q, res.HTTPURL, "authoritative=true")
	}
	return ok(q, map[string]string{
		"brokerUrl":    res.BrokerURL,
		"brokerUrlTls": res.BrokerURLTLS,
		"httpUrl":      res.HTTPURL,
		"httpUrlTls":   res.HTTPURLTLS,
		"nativeUrl":    res.BrokerURL,
	})
}

// redirect answers 307 to the same path on another broker's web service.
func (h *Handler) redirect(q *request, webURL, extraQuery string) error {
	base, err := url.Parse(webURL)
	if err != nil || base.Host == "" {
		return failf(http.StatusServiceUnavailable, "no address for the owning broker")
	}
	u := *q.r.URL
	u.Scheme, u.Host = base.Scheme, base.Host
	if extraQuery != "" {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += extraQuery
	}
	http.Redirect(q.w, q.r, u.String(), http.StatusTemporaryRedirect)
	return nil
}

// namespaceBundles serves GET /admin/v2/namespaces/{t}/{ns}/bundles.
func (h *Handler) namespaceBundles(q *request, tenant, ns string) error {
	if q.method() != http.MethodGet {
		return errNotAllowed
	}
	if err := h.checkNamespace(q, tenant, ns); err != nil {
		return err
	}
	b, err := h.svc.NamespaceBundles(q.ctx, tenant, ns)
	if err != nil {
		return err
	}
	return ok(q, broker.BundlesData{Boundaries: b.Strings(), NumBundles: b.Count()})
}

// isBundleName reports whether s looks like "0x00000000_0x40000000".
func isBundleName(s string) bool { return strings.HasPrefix(s, "0x") && strings.Contains(s, "_0x") }

// bundleOp serves PUT .../{t}/{ns}/{bundle}/unload and .../split.
func (h *Handler) bundleOp(q *request, tenant, ns, name, op string) error {
	if q.method() != http.MethodPut {
		return errNotAllowed
	}
	if err := h.checkNamespace(q, tenant, ns); err != nil {
		return err
	}
	r, err := bundle.ParseRange(name)
	if err != nil {
		return failf(http.StatusPreconditionFailed, "Invalid bundle range %s", name)
	}
	b, err := h.svc.NamespaceBundles(q.ctx, tenant, ns)
	if err != nil {
		return err
	}
	if !b.Has(r) {
		return failf(http.StatusNotFound, "Bundle %s not found in namespace %s/%s", name, tenant, ns)
	}
	switch op {
	case "unload":
		dest, err := h.destinationBroker(q, q.query("destinationBroker"))
		if err != nil {
			return err
		}
		err = h.svc.UnloadBundle(q.ctx, tenant, ns, r, dest)
		if errors.Is(err, broker.ErrNotOwned) {
			return h.toOwner(q, tenant, ns, r)
		}
		if err != nil {
			return err
		}
		return noContent(q)
	case "split":
		err := h.svc.SplitBundle(q.ctx, tenant, ns, r, q.queryBool("unload"))
		if errors.Is(err, broker.ErrNotOwned) {
			owner, owned, oerr := h.svc.BundleOwner(q.ctx, tenant, ns, r)
			if oerr != nil {
				return oerr
			}
			if !owned {
				return failf(http.StatusPreconditionFailed, "Bundle %s is not served by any broker; look up one of its topics first", name)
			}
			return h.redirect(q, owner.HTTPURL, "")
		}
		if err != nil {
			return err
		}
		return noContent(q)
	}
	return errNotFound
}

// toOwner redirects a bundle request to its owner; an unowned bundle has
// nothing to unload.
func (h *Handler) toOwner(q *request, tenant, ns string, r bundle.Range) error {
	owner, owned, err := h.svc.BundleOwner(q.ctx, tenant, ns, r)
	if err != nil {
		return err
	}
	if !owned {
		return noContent(q)
	}
	if owner.BrokerID == h.svc.BrokerID() {
		return failf(http.StatusServiceUnavailable, "bundle is changing owner; retry")
	}
	return h.redirect(q, owner.HTTPURL, "")
}

// destinationBroker resolves a destinationBroker parameter (a broker id,
// its web host:port or a URL) to the active broker it names; nil when dest
// is empty.
func (h *Handler) destinationBroker(q *request, dest string) (*broker.BrokerInfo, error) {
	if dest == "" {
		return nil, nil
	}
	brokers, err := h.svc.Brokers(q.ctx)
	if err != nil {
		return nil, err
	}
	for _, b := range brokers {
		web := strings.TrimPrefix(strings.TrimPrefix(b.WebServiceURL, "http://"), "https://")
		if dest == b.BrokerID || dest == web || dest == b.ServiceURL || dest == b.WebServiceURL {
			return &b, nil
		}
	}
	return nil, failf(http.StatusPreconditionFailed, "Destination broker %s is not active", dest)
}

// unloadNamespace unloads every bundle of a namespace: the ones owned here
// directly, the others by asking their owners.
func (h *Handler) unloadNamespace(q *request, tenant, ns string) error {
	if err := h.checkNamespace(q, tenant, ns); err != nil {
		return err
	}
	b, err := h.svc.NamespaceBundles(q.ctx, tenant, ns)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range b.Ranges() {
		err := h.svc.UnloadBundle(q.ctx, tenant, ns, r, nil)
		if !errors.Is(err, broker.ErrNotOwned) {
			errs = append(errs, err)
			continue
		}
		owner, owned, oerr := h.svc.BundleOwner(q.ctx, tenant, ns, r)
		if oerr != nil || !owned || owner.BrokerID == h.svc.BrokerID() {
			errs = append(errs, oerr)
			continue
		}
		u := strings.TrimSuffix(owner.HTTPURL, "/") + "/admin/v2/namespaces/" + tenant + "/" + ns + "/" + r.String() + "/unload"
		req, err := http.NewRequestWithContext(q.ctx, http.MethodPut, u, nil)
		if err == nil {
			// The caller was authorized here; the owner trusts this broker.
			err = h.svc.SignInternal(req)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := h.svc.PeerHTTPClient().Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			errs = append(errs, fmt.Errorf("unload %s on %s: %s", r, owner.BrokerID, resp.Status))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return noContent(q)
}

// brokerList serves GET /admin/v2/brokers[/{cluster}]: the active brokers'
// web host:ports, as Pulsar lists them.
func (h *Handler) brokerList(q *request) error {
	bs, err := h.svc.Brokers(q.ctx)
	if err != nil {
		return err
	}
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, webHostPort(b.WebServiceURL))
	}
	return ok(q, out)
}

// ownedNamespaces serves GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces
// for this broker (another broker's request is redirected to it).
func (h *Handler) ownedNamespaces(q *request, id string) error {
	if id != h.webHostPort() && id != h.svc.BrokerID() {
		bs, err := h.svc.Brokers(q.ctx)
		if err != nil {
			return err
		}
		for _, b := range bs {
			if id == webHostPort(b.WebServiceURL) || id == b.BrokerID {
				return h.redirect(q, b.WebServiceURL, "")
			}
		}
		return failf(http.StatusNotFound, "Broker %s is not active", id)
	}
	out := map[string]map[string]any{}
	for _, b := range h.svc.OwnedBundles() {
		out[b] = map[string]any{"broker_assignment": "shared", "is_controlled": false, "is_active": true}
	}
	return ok(q, out)
}

// webHostPort returns the host:port of a web service URL.
func webHostPort(web string) string {
	u, err := url.Parse(web)
	if err != nil || u.Host == "" {
		return web
	}
	return u.Host
}
