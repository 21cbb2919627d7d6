package apiserver

// The issuer's revocation list: the client ids (API key uids) of the keys
// revoked or deleted recently enough that access tokens issued for them
// may still be unexpired. Brokers fetch it (issuer.RevokedPath, named in
// the discovery document) every few seconds and refuse, and disconnect,
// tokens of those keys, so access tokens can live long (a client rides
// out a control-plane outage for the rest of its token's life) while a
// revocation still takes effect within seconds.
//
// The list is read from the store's change log of API keys, tailed on
// demand: a key whose state became REVOKED enters at its revoke time, a
// deleted key at the time its deletion was read. An entry leaves once
// every token issued before it has expired (TokenTTL, plus a minute for
// clock skew). Entries are never wrong to have: a revoked or deleted key
// gets no new tokens, so listing it longer only costs bytes; after a
// restart every key deleted in the change log's history is listed for one
// TokenTTL again.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// revocationSkew is how long past TokenTTL a revoked key stays listed.
const revocationSkew = time.Minute

// revocations is the revocation list's state; see the comment above.
type revocations struct {
	store store.Reader
	keep  func() time.Duration // how long an entry stays listed
	now   func() time.Time

	mu   sync.Mutex
	rev  int64                // change log read up to this revision
	uids map[string]time.Time // client id -> revoked or deletion seen
}

func newRevocations(st store.Reader, keep func() time.Duration) *revocations {
	return &revocations{store: st, keep: keep, now: time.Now, uids: map[string]time.Time{}}
}

// list reads the change log since the last call and returns the listed
// client ids, sorted.
func (r *revocations) list(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	const page = 1000
	for {
		chs, err := r.store.Changes(ctx, r.rev, page, kindApiKey.collection)
		if err != nil {
			return nil, err
		}
		for _, ch := range chs {
			r.rev = ch.Revision
			r.note(ch)
		}
		if len(chs) < page {
			break
		}
	}
	now, keep := r.now(), r.keep()
	out := make([]string, 0, len(r.uids))
	for uid, at := range r.uids {
		if now.Sub(at) > keep {
			delete(r.uids, uid)
			continue
		}
		out = append(out, uid)
	}
	slices.Sort(out)
	return out, nil
}

// note records ch when it revoked or deleted a key.
func (r *revocations) note(ch store.Change) {
	uid := ch.Object.UID
	if uid == "" {
		return
	}
	if ch.Deleted {
		if _, ok := r.uids[uid]; !ok {
			r.uids[uid] = r.now()
		}
		return
	}
	m, _, err := decode(kindApiKey, ch.Object)
	if err != nil {
		return
	}
	k := m.(*cpv1.ApiKey)
	if k.GetState() != cpv1.ApiKey_REVOKED {
		return
	}
	at := r.now()
	if t := k.GetRevokeTime(); t != nil {
		at = t.AsTime()
	}
	r.uids[uid] = at
}

// revokedDoc is the revocation list's JSON.
type revokedDoc struct {
	// ClientIDs are the client_id claims whose tokens are refused.
	ClientIDs []string `json:"client_ids"`
}

// oauthRevoked serves the revocation list. It is public, as the JWKS is:
// key uids are not secrets.
func (s *Server) oauthRevoked(w http.ResponseWriter, r *http.Request) {
	ids, err := s.revoked.list(r.Context())
	if err != nil {
		s.log.Error("apiserver: revocation list", "err", err)
		writeJSONDoc(w, http.StatusServiceUnavailable, map[string]string{"error": "temporarily_unavailable"})
		return
	}
	body, err := json.Marshal(revokedDoc{ClientIDs: ids})
	if err != nil {
		writeJSONDoc(w, http.StatusInternalServerError, map[string]string{"error": "server_error"})
		return
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:12]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}
