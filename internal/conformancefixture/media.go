package conformancefixture

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
)

// The binary payloads of the image and audio tools, the binary resource and
// the image prompt: real files a client can decode, made once at start.
var (
	pngPixel = redPixelPNG()
	wavClip  = silentWAV(8000, 800) // 0.1 s of 8 kHz mono silence
)

// redPixelPNG encodes a 1x1 red PNG.
func redPixelPNG() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err) // encoding a fixed in-memory image cannot fail
	}
	return b.Bytes()
}

// silentWAV is a PCM WAV file (RIFF, 16-bit mono) of samples zero samples
// at rate Hz.
func silentWAV(rate, samples uint32) []byte {
	const channels, bits = 1, 16
	data := samples * channels * bits / 8
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	w(uint32(36 + data))
	b.WriteString("WAVEfmt ")
	w(uint32(16))                  // fmt chunk size
	w(uint16(1))                   // PCM
	w(uint16(channels))            //
	w(rate)                        //
	w(rate * channels * bits / 8)  // byte rate
	w(uint16(channels * bits / 8)) // block align
	w(uint16(bits))                //
	b.WriteString("data")
	w(data)
	b.Write(make([]byte, data))
	return b.Bytes()
}
