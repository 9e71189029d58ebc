package grpcmw

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	spb "google.golang.org/genproto/googleapis/rpc/status"
)

// A result is what a unary call answered, as Idempotency stores and
// replays it.
type result struct {
	typeName string // the response's full message name; "" for an error
	msg      []byte // the response, in deterministic proto encoding
	status   []byte // the google.rpc.Status of an error (code, message, details)
	header   metadata.MD
	trailer  metadata.MD
}

// A stored result is the magic and then protobuf wire fields, so that it
// can grow fields without a new format:
//
//	1: response type name   2: response bytes   3: google.rpc.Status bytes
//	4: header entry         5: trailer entry     (an entry: 1 key, 2 value)
const resultMagic = "LKG1"

const (
	fieldType protowire.Number = iota + 1
	fieldMsg
	fieldStatus
	fieldHeader
	fieldTrailer
)

var errBadResult = errors.New("grpcmw: malformed stored result")

// statusOf is the status the gRPC server sends for a handler's error: a
// status error's own, a context error's Canceled or DeadlineExceeded, and
// Unknown for any other error.
func statusOf(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// newResult makes the result of a handler's answer and the metadata it
// set. A successful answer that is not a proto.Message cannot be stored.
func newResult(resp any, err error, header, trailer metadata.MD) (*result, error) {
	res := &result{header: header, trailer: trailer}
	if err != nil {
		b, merr := proto.Marshal(statusOf(err).Proto())
		if merr != nil {
			return nil, merr
		}
		res.status = b
		return res, nil
	}
	m, ok := resp.(proto.Message)
	if !ok || m == nil {
		return nil, fmt.Errorf("grpcmw: response %T is not a proto.Message", resp)
	}
	b, merr := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if merr != nil {
		return nil, merr
	}
	res.typeName, res.msg = string(m.ProtoReflect().Descriptor().FullName()), b
	return res, nil
}

// encode returns res in its stored form.
func (res *result) encode() []byte {
	b := []byte(resultMagic)
	if res.status != nil {
		b = protowire.AppendTag(b, fieldStatus, protowire.BytesType)
		b = protowire.AppendBytes(b, res.status)
	} else {
		b = protowire.AppendTag(b, fieldType, protowire.BytesType)
		b = protowire.AppendString(b, res.typeName)
		b = protowire.AppendTag(b, fieldMsg, protowire.BytesType)
		b = protowire.AppendBytes(b, res.msg)
	}
	b = appendMD(b, fieldHeader, res.header)
	return appendMD(b, fieldTrailer, res.trailer)
}

// appendMD appends md's entries, keys in order, as fields f.
func appendMD(b []byte, f protowire.Number, md metadata.MD) []byte {
	for _, k := range slices.Sorted(maps.Keys(md)) {
		for _, v := range md[k] {
			var e []byte
			e = protowire.AppendTag(e, 1, protowire.BytesType)
			e = protowire.AppendString(e, k)
			e = protowire.AppendTag(e, 2, protowire.BytesType)
			e = protowire.AppendString(e, v)
			b = protowire.AppendTag(b, f, protowire.BytesType)
			b = protowire.AppendBytes(b, e)
		}
	}
	return b
}

// decodeResult reads a stored result.
func decodeResult(b []byte) (*result, error) {
	if !strings.HasPrefix(string(b), resultMagic) {
		return nil, errBadResult
	}
	b = b[len(resultMagic):]
	res := &result{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return nil, errBadResult
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, errBadResult
		}
		b = b[n:]
		switch num {
		case fieldType:
			res.typeName = string(v)
		case fieldMsg:
			res.msg = v
		case fieldStatus:
			res.status = v
		case fieldHeader, fieldTrailer:
			k, val, err := decodeEntry(v)
			if err != nil {
				return nil, err
			}
			md := &res.header
			if num == fieldTrailer {
				md = &res.trailer
			}
			if *md == nil {
				*md = metadata.MD{}
			}
			(*md)[k] = append((*md)[k], val)
		default:
			return nil, fmt.Errorf("%w: field %d", errBadResult, num)
		}
	}
	return res, nil
}

func decodeEntry(b []byte) (key, value string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return "", "", errBadResult
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", "", errBadResult
		}
		b = b[n:]
		switch num {
		case 1:
			key = string(v)
		case 2:
			value = string(v)
		}
	}
	if key == "" {
		return "", "", errBadResult
	}
	return key, value, nil
}

// answer returns the response or the error of the call res stores: a new
// message of the stored type (found in protoregistry.GlobalTypes, where
// generated code registers it) or the stored status. err says why res
// cannot be replayed.
func (res *result) answer() (resp any, callErr error, err error) {
	if res.status != nil {
		var s spb.Status
		if err := proto.Unmarshal(res.status, &s); err != nil {
			return nil, nil, fmt.Errorf("%w: status: %w", errBadResult, err)
		}
		if codes.Code(s.GetCode()) == codes.OK {
			return nil, nil, fmt.Errorf("%w: an error of code OK", errBadResult)
		}
		return nil, status.FromProto(&s).Err(), nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(res.typeName))
	if err != nil {
		return nil, nil, fmt.Errorf("grpcmw: stored response type %q: %w", res.typeName, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(res.msg, m); err != nil {
		return nil, nil, fmt.Errorf("%w: response: %w", errBadResult, err)
	}
	return m, nil, nil
}
