package apiserver

import (
	"context"
	"errors"
	"regexp"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// The standard methods, shared by every collection. Each authorizes first
// (so a caller learns nothing about resources it may not see), then
// validates, then runs the change and its audit event in one transaction.

// idPattern is the loosest id any collection accepts; the policy's naming
// rules are stricter for organizations, clusters, service accounts and
// regions.
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

func checkPageSize(n int32) error {
	if n < 0 {
		return invalid("page_size", "must not be negative")
	}
	return nil
}

func (s *Server) get(ctx context.Context, k *kind, name string) (proto.Message, error) {
	r, err := k.parseName("name", name)
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, target{kind: k, verb: "get", res: r}); err != nil {
		return nil, err
	}
	obj, err := s.store.Get(ctx, k.collection, r.name)
	if err != nil {
		return nil, s.toStatus(err, r.name)
	}
	m, _, err := decode(k, obj)
	return m, s.toStatus(err, r.name)
}

// list returns one page of k's resources under parent.
func (s *Server) list(ctx context.Context, k *kind, parent string, pageSize int32, token string) ([]proto.Message, string, error) {
	pr, err := k.parseParent("parent", parent)
	if err != nil {
		return nil, "", err
	}
	if err := checkPageSize(pageSize); err != nil {
		return nil, "", err
	}
	if err := s.authorize(ctx, target{kind: k, verb: "list", res: resName{parent: pr.name, org: pr.org}}); err != nil {
		return nil, "", err
	}
	if pk := k.parentKind(); pk != nil {
		// A missing parent is NOT_FOUND naming it, not an empty list.
		if _, err := s.store.Get(ctx, pk.collection, pr.name); err != nil {
			return nil, "", s.toStatus(err, pr.name)
		}
	}
	objs, next, err := s.store.List(ctx, store.ListQuery{Kind: k.collection, Parent: pr.name, PageSize: int(pageSize), PageToken: token})
	if err != nil {
		return nil, "", s.toStatus(err, "")
	}
	out := make([]proto.Message, 0, len(objs))
	for _, o := range objs {
		m, _, err := decode(k, o)
		if err != nil {
			return nil, "", s.toStatus(err, o.Name)
		}
		out = append(out, m)
	}
	return out, next, nil
}

// createReq is one create call.
type createReq struct {
	k         *kind
	parent    string
	id        string
	msg       proto.Message
	requestID string
	// attrs are the request fields the policy's admission rules read.
	attrs map[string]any
	// validate checks msg after authorization; it may fill defaults.
	validate func(name resName) error
	// uid and secretHash are stored with the object (API keys).
	uid, secretHash string
	// extra runs in the create's transaction after the object is created
	// (not on a replay).
	extra func(w store.Writer, obj store.Object) error
}

// create stores a new resource. A replayed request_id returns the resource
// the first call created and writes nothing (AIP-155); a request_id used
// before by a different request is refused (requestid.go).
func (s *Server) create(ctx context.Context, cr createReq) (store.Object, error) {
	k := cr.k
	pr, err := k.parseParent("parent", cr.parent)
	if err != nil {
		return store.Object{}, err
	}
	idField := k.field + "_id"
	if cr.id == "" {
		return store.Object{}, invalid(idField, "required")
	}
	r := k.childName(pr, cr.id)
	if err := s.authorize(ctx, target{kind: k, verb: "create", res: r, attrs: cr.attrs}); err != nil {
		return store.Object{}, err
	}
	if ids := k.idRegexp(); !ids.MatchString(cr.id) {
		return store.Object{}, invalid(idField, "must match %s", ids)
	}
	if cr.msg == nil {
		return store.Object{}, invalid(k.field, "required")
	}
	if cr.validate != nil {
		if err := cr.validate(r); err != nil {
			return store.Object{}, err
		}
	}
	data, err := record{SecretSHA256: cr.secretHash, RequestSHA256: requestFingerprint(ctx)}.encode(cr.msg)
	if err != nil {
		return store.Object{}, s.toStatus(err, r.name)
	}
	obj := store.Object{Kind: k.collection, Name: r.name, Parent: pr.name, Org: r.org, UID: cr.uid, Data: data}
	var out store.Object
	err = s.tx(ctx, func(w store.Writer) error {
		if pk := k.parentKind(); pk != nil {
			if _, err := w.Get(ctx, pk.collection, pr.name); err != nil {
				return s.toStatus(err, pr.name)
			}
		}
		_, getErr := w.Get(ctx, k.collection, r.name)
		existed := getErr == nil
		if getErr != nil && !errors.Is(getErr, store.ErrNotFound) {
			return getErr
		}
		var err error
		out, err = w.Create(ctx, obj, cr.requestID)
		if err != nil {
			return s.toStatus(err, r.name)
		}
		if out.Name != obj.Name {
			return reusedRequestID(out.Name)
		}
		if existed { // replay of an earlier create: the same request?
			_, rec, err := decode(k, out)
			if err != nil {
				return err
			}
			return checkReplay(ctx, rec, out.Name)
		}
		if cr.extra != nil {
			if err := cr.extra(w, out); err != nil {
				return err
			}
		}
		return audit(ctx, w, r.org, r.name, cr.requestID)
	})
	return out, s.toStatus(err, r.name)
}

// update applies msg's masked fields to the stored resource. check may
// inspect and change the merged resource (old is as stored) inside the
// transaction.
func (s *Server) update(ctx context.Context, k *kind, msg proto.Message, mask *fieldmaskpb.FieldMask,
	attrs map[string]any, check func(w store.Writer, old, merged proto.Message) error) (proto.Message, error) {
	if msg == nil || !msg.ProtoReflect().IsValid() {
		return nil, invalid(k.field, "required")
	}
	r, err := k.parseName(k.field+".name", stringField(msg, "name"))
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, target{kind: k, verb: "update", res: r, attrs: attrs}); err != nil {
		return nil, err
	}
	paths, err := k.checkMask(mask, msg)
	if err != nil {
		return nil, err
	}
	etag := stringField(msg, "etag")
	var out proto.Message
	err = s.tx(ctx, func(w store.Writer) error {
		obj, err := w.Get(ctx, k.collection, r.name)
		if err != nil {
			return err
		}
		if etag != "" && etag != obj.Etag {
			return store.ErrEtagMismatch
		}
		old, rec, err := decode(k, obj)
		if err != nil {
			return err
		}
		merged := proto.Clone(old)
		applyMask(merged, msg, paths)
		if check != nil {
			if err := check(w, old, merged); err != nil {
				return err
			}
		}
		if obj.Data, err = rec.encode(merged); err != nil {
			return err
		}
		updated, err := w.Update(ctx, obj, obj.Etag)
		if err != nil {
			return err
		}
		if out, _, err = decode(k, updated); err != nil {
			return err
		}
		return audit(ctx, w, r.org, r.name, "")
	})
	if err != nil {
		return nil, s.toStatus(err, r.name)
	}
	return out, nil
}

// remove deletes a resource; check may refuse inside the transaction.
func (s *Server) remove(ctx context.Context, k *kind, name, etag string, check func(w store.Writer, old proto.Message) error) error {
	r, err := k.parseName("name", name)
	if err != nil {
		return err
	}
	if err := s.authorize(ctx, target{kind: k, verb: "delete", res: r}); err != nil {
		return err
	}
	err = s.tx(ctx, func(w store.Writer) error {
		obj, err := w.Get(ctx, k.collection, r.name)
		if err != nil {
			return err
		}
		if etag != "" && etag != obj.Etag {
			return store.ErrEtagMismatch
		}
		if check != nil {
			old, _, err := decode(k, obj)
			if err != nil {
				return err
			}
			if err := check(w, old); err != nil {
				return err
			}
		}
		if err := w.Delete(ctx, k.collection, r.name, obj.Etag); err != nil {
			return err
		}
		return audit(ctx, w, r.org, r.name, "")
	})
	return s.toStatus(err, r.name)
}

// tx runs fn in a store transaction and wakes long-polls after a commit.
func (s *Server) tx(ctx context.Context, fn func(w store.Writer) error) error {
	err := s.store.Tx(ctx, fn)
	if err == nil {
		s.changed.broadcast()
	}
	return err
}
