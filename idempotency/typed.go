package idempotency

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// maxResultBytes is the largest encoded typed result DoTyped stores.
const maxResultBytes = driver.MaxResultBytes

// Codec turns a typed result into bytes and back. Name (1 to 32 letters,
// digits, '-', '_' or '.'; else DoTyped returns ErrInvalid) is stored with
// the result (the record's Status is "TYPED RESULT " + Name), so that a result is
// never decoded by another codec than the one that wrote it.
type Codec interface {
	Name() string
	Encode(v any) ([]byte, error)
	Decode(data []byte, v any) error
}

// maxCodecName is the longest Codec name.
const maxCodecName = 32

// validCodecName: a codec's name is stored in the record's Status, so it
// is a short token (letters, digits, '-', '_', '.'), never one that makes
// the Status another marker or is cut.
func validCodecName(name string) bool {
	if name == "" || len(name) > maxCodecName {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// jsonCodec is the default Codec: encoding/json, named "json", decoding
// strictly (DisallowUnknownFields).
type jsonCodec struct{}

func (jsonCodec) Name() string                 { return "json" }
func (jsonCodec) Encode(v any) ([]byte, error) { return json.Marshal(v) }

// Decode refuses a field the type does not have, and data after the
// value: a record written for another type (a renamed field, two call
// sites sharing a namespace) is ErrResultUnreadable, never decoded into a
// zero value passed off as the result.
func (jsonCodec) Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the value")
	}
	return nil
}

// The Status of a DONE record written by DoTyped ("TYPED RESULT json"):
// resultStatus + the
// codec's name, plus base64Suffix when the encoded bytes were not UTF-8
// text (PostgreSQL's and DynamoDB's strings take only that); or one of the
// markers of a result that was not stored (the Detail then says why).
//
// Every one starts with typedStatusPrefix, which Guard.Do and
// Guard.Complete refuse in a status of their own (ErrInvalid): a record
// DoTyped decodes is one DoTyped wrote, never a Guard.Do result whose
// status happens to look like one.
const (
	resultStatus      = typedStatusPrefix + "RESULT "
	base64Suffix      = " base64"
	statusTooLarge    = typedStatusPrefix + "RESULT NOT STORED: TOO LARGE"
	statusUnencodable = typedStatusPrefix + "RESULT NOT STORED: UNENCODABLE"
)

// typedStatusPrefix starts the Status of every DONE record DoTyped
// writes. Guard.Do and Guard.Complete refuse a status that starts with it.
const typedStatusPrefix = "TYPED "

// typedStatusError is the error of a Guard.Do or Guard.Complete status
// that starts with typedStatusPrefix.
func typedStatusError(status string) error {
	if !strings.HasPrefix(status, typedStatusPrefix) {
		return nil
	}
	return fmt.Errorf("%w: status %.40q starts with %q, kept for DoTyped's records", ErrInvalid, status, typedStatusPrefix)
}

// namespaceSeparator joins DoOptions.Namespace and the key.
const namespaceSeparator = ":"

// namespacedKey is the key stored for key in namespace ns (key itself when
// ns is empty). It refuses an empty key (ErrInvalid): a missing key is
// never defaulted, or every caller without one would share one record.
func namespacedKey(ns, key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if strings.Contains(ns, namespaceSeparator) {
		return "", fmt.Errorf("%w: namespace %q holds the separator", ErrInvalid, ns)
	}
	if ns == "" {
		return key, nil
	}
	return ns + namespaceSeparator + key, nil
}

// TypedResult is what DoTyped did: DoResult's fields, with the work's value
// in place of Done.
type TypedResult[T any] struct {
	// Outcome, Err, Record, Attempt and RetryAfter are as in DoResult.
	Outcome Outcome
	// Value is the work's value, as stored and decoded back (Acquired,
	// Reclaimed: the same value every duplicate gets, whatever the codec
	// lost), or the first result decoded from the record (DuplicateDone).
	// When the value was not stored (ErrResultNotStored) it is the work's
	// own.
	Value T
	// Replayed: Value is the stored first result, not this call's work.
	Replayed   bool
	Err        error
	Record     driver.Record
	Attempt    int
	RetryAfter time.Duration
}

// DoTyped is Guard.Do for work that returns a value: the value of the
// first run is encoded (opts.Codec, JSON by default), stored with DONE, and
// handed back to every duplicate, decoded, with Replayed true. The claim,
// the fingerprint rules (the same key with another fingerprint is a
// Conflict, whatever the record's state), the heartbeat and the outcomes of
// a failing work (ErrPermanent → Failed, recorded FAILED; ErrNotStarted →
// Unfinished with the lease given up; any other error → Unfinished with the
// lease kept) are Do's.
//
// The encoded value may be up to driver.MaxResultBytes; it is not cut, as Do's
// Detail is. A larger one, or one the codec refuses, is not stored: the
// work has run, so the key is recorded DONE with a marker and never runs
// again; this call returns the value with an error wrapping
// ErrResultNotStored (and ErrResultTooLarge), and so does every duplicate
// (without a value). A DONE record that does not decode returns
// ErrResultUnreadable. Other errors are Do's: ErrInvalid (an empty key, bad
// options), ErrUnavailable (the store).
func DoTyped[T any](ctx context.Context, g *Guard, key, fingerprint string, work func(context.Context, Run) (T, error), opts DoOptions) (TypedResult[T], error) {
	if g == nil || work == nil {
		return TypedResult[T]{}, fmt.Errorf("%w: nil guard or work", ErrInvalid)
	}
	codec := opts.Codec
	if codec == nil {
		codec = jsonCodec{}
	}
	if !validCodecName(codec.Name()) {
		return TypedResult[T]{}, fmt.Errorf("%w: codec name %.40q: want 1 to %d letters, digits, '-', '_' or '.'", ErrInvalid, codec.Name(), maxCodecName)
	}
	var (
		value    T
		notStore error // why the value was not stored
	)
	res, err := g.do(ctx, key, fingerprint, func(ctx context.Context, run Run) (Done, error) {
		v, err := work(ctx, run)
		if err != nil {
			return Done{}, err
		}
		value = v
		d, nerr := encodeResult(codec, v)
		if nerr == nil {
			// Every caller gets the same value: this one too gets the
			// stored value decoded (a codec may lose what it cannot
			// encode: invalid UTF-8, a json:"-" field), not the work's.
			var back T
			if derr := decodeResult(codec, driver.Record{Status: d.Status, Detail: d.Detail}, &back); derr != nil {
				nerr = fmt.Errorf("%w: codec %s: the encoded result does not decode back: %w", ErrResultNotStored, codec.Name(), derr)
			} else {
				value = back
			}
		}
		if nerr != nil {
			notStore = nerr
			status := statusUnencodable
			if errors.Is(nerr, ErrResultTooLarge) {
				status = statusTooLarge
			}
			return Done{Status: status, Detail: nerr.Error()}, nil
		}
		return d, nil
	}, opts, driver.MaxResultBytes)
	out := TypedResult[T]{Outcome: res.Outcome, Err: res.Err, Record: res.Record, Attempt: res.Attempt, RetryAfter: res.RetryAfter}
	switch res.Outcome {
	case Acquired, Reclaimed:
		out.Value = value
		if err == nil && notStore != nil {
			out.Err, err = notStore, notStore
		}
	case DuplicateDone:
		out.Replayed = true
		if derr := decodeResult(codec, res.Record, &out.Value); derr != nil {
			out.Replayed, out.Err = false, derr
			return out, derr
		}
	}
	return out, err
}

// encodeResult is the DONE record's Status and Detail for v.
func encodeResult(codec Codec, v any) (Done, error) {
	b, err := codec.Encode(v)
	if err != nil {
		return Done{}, fmt.Errorf("%w: codec %s: %w", ErrResultNotStored, codec.Name(), err)
	}
	status, detail := resultStatus+codec.Name(), string(b)
	if !utf8.Valid(b) || strings.IndexByte(detail, 0) >= 0 {
		status, detail = status+base64Suffix, base64.StdEncoding.EncodeToString(b)
	}
	if len(detail) > maxResultBytes {
		return Done{}, fmt.Errorf("%w (%w): the %s result encodes to %d bytes, more than the %d bytes a store keeps; the work ran and will not run again for this key",
			ErrResultNotStored, ErrResultTooLarge, codec.Name(), len(detail), maxResultBytes)
	}
	return Done{Status: status, Detail: detail}, nil
}

// decodeResult decodes a DONE record's result into v.
func decodeResult(codec Codec, r driver.Record, v any) error {
	switch r.Status {
	case statusTooLarge:
		return fmt.Errorf("%w (%w): the first run's result was not stored (%s)", ErrResultNotStored, ErrResultTooLarge, r.Detail)
	case statusUnencodable:
		return fmt.Errorf("%w: the first run's result was not stored (%s)", ErrResultNotStored, r.Detail)
	}
	data := []byte(r.Detail)
	switch r.Status {
	case resultStatus + codec.Name():
	case resultStatus + codec.Name() + base64Suffix:
		b, err := base64.StdEncoding.DecodeString(r.Detail)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrResultUnreadable, err)
		}
		data = b
	default:
		return fmt.Errorf("%w: record status %q, want a result of codec %s", ErrResultUnreadable, r.Status, codec.Name())
	}
	if err := codec.Decode(data, v); err != nil {
		return fmt.Errorf("%w: codec %s: %w", ErrResultUnreadable, codec.Name(), err)
	}
	return nil
}
