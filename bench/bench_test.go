package bench

import (
	"bytes"
	"encoding/json"
	"testing"

	santhosh "github.com/santhosh-tekuri/jsonschema/v6"
)

// BenchmarkValidateDecoded times validation alone: each implementation gets
// the arguments already decoded in the form it prefers, outside the timer.
func BenchmarkValidateDecoded(b *testing.B) {
	for _, f := range Fixtures() {
		b.Run(f.Name, func(b *testing.B) {
			b.Run("backplane", func(b *testing.B) {
				s := mustBackplane(b, f)
				args, err := decodeUseNumber(f.Args)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Validate(args); err != nil {
					b.Fatalf("fixture arguments rejected: %v", err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(f.Args)))
				for b.Loop() {
					if err := s.Validate(args); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("santhosh", func(b *testing.B) {
				s := mustSanthosh(b, f)
				args, err := santhosh.UnmarshalJSON(bytes.NewReader(f.Args))
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Validate(args); err != nil {
					b.Fatalf("fixture arguments rejected: %v", err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(f.Args)))
				for b.Loop() {
					if err := s.Validate(args); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("google", func(b *testing.B) {
				s := mustGoogle(b, f)
				var args any
				if err := json.Unmarshal(f.Args, &args); err != nil {
					b.Fatal(err)
				}
				if err := s.Validate(args); err != nil {
					b.Fatalf("fixture arguments rejected: %v", err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(f.Args)))
				for b.Loop() {
					if err := s.Validate(args); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkValidateBytes times what a gateway pays per call: decoding the
// argument bytes plus validation. jsonvalid and jsonunmarshal are the floor
// set by encoding/json, which validates nothing against a schema.
func BenchmarkValidateBytes(b *testing.B) {
	for _, f := range Fixtures() {
		b.Run(f.Name, func(b *testing.B) {
			b.Run("backplane", func(b *testing.B) {
				s := mustBackplane(b, f)
				if err := s.ValidateJSON(f.Args); err != nil {
					b.Fatalf("fixture arguments rejected: %v", err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(f.Args)))
				for b.Loop() {
					if err := s.ValidateJSON(f.Args); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("santhosh", func(b *testing.B) {
				s := mustSanthosh(b, f)
				validate := func() error {
					args, err := santhosh.UnmarshalJSON(bytes.NewReader(f.Args))
					if err != nil {
						return err
					}
					return s.Validate(args)
				}
				if err := validate(); err != nil {
					b.Fatalf("fixture arguments rejected: %v", err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(f.Args)))
				for b.Loop() {
					if err := validate(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("google", func(b *testing.B) {
				s := mustGoogle(b, f)
				validate := func() error {
					var args any
					if err := json.Unmarshal(f.Args, &args); err != nil {
						return err
					}
					return s.Validate(args)
				}
				if err := validate(); err != nil {
					b.Fatalf("fixture arguments rejected: %v", err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(f.Args)))
				for b.Loop() {
					if err := validate(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("jsonvalid", func(b *testing.B) {
				if !json.Valid(f.Args) {
					b.Fatal("fixture arguments are not valid JSON")
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(f.Args)))
				for b.Loop() {
					if !json.Valid(f.Args) {
						b.Fatal("invalid")
					}
				}
			})
			b.Run("jsonunmarshal", func(b *testing.B) {
				var probe any
				if err := json.Unmarshal(f.Args, &probe); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(f.Args)))
				for b.Loop() {
					var args any
					if err := json.Unmarshal(f.Args, &args); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
