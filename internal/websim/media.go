package websim

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/color/palette"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"strings"
)

// picture draws a small deterministic image: a diagonal gradient between
// two colours with a stripe, so that files differ and compress like photos
// rather than like flat fills.
func picture(rng *rand.Rand, width, height int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	c0 := [3]int{rng.IntN(256), rng.IntN(256), rng.IntN(256)}
	c1 := [3]int{rng.IntN(256), rng.IntN(256), rng.IntN(256)}
	stripe := rng.IntN(height)
	for y := range height {
		for x := range width {
			t := (x + y) * 255 / (width + height)
			var px color.RGBA
			px.R = uint8(c0[0] + (c1[0]-c0[0])*t/255)
			px.G = uint8(c0[1] + (c1[1]-c0[1])*t/255)
			px.B = uint8(c0[2] + (c1[2]-c0[2])*t/255)
			px.A = 255
			if y == stripe || y == stripe+1 {
				px.R, px.G, px.B = 255-px.R, 255-px.G, 255-px.B
			}
			img.SetRGBA(x, y, px)
		}
	}
	return img
}

func encodePNG(rng *rand.Rand, width, height int) []byte {
	var b bytes.Buffer
	// Encoding an in-memory image cannot fail.
	(&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&b, picture(rng, width, height))
	return b.Bytes()
}

func encodeJPEG(rng *rand.Rand, width, height int) []byte {
	var b bytes.Buffer
	jpeg.Encode(&b, picture(rng, width, height), &jpeg.Options{Quality: 60})
	return b.Bytes()
}

func encodeGIF(rng *rand.Rand, width, height int) []byte {
	src := picture(rng, width, height)
	img := image.NewPaletted(src.Bounds(), palette.WebSafe)
	for y := range height {
		for x := range width {
			img.Set(x, y, src.At(x, y))
		}
	}
	var b bytes.Buffer
	gif.Encode(&b, img, nil)
	return b.Bytes()
}

// encodeICO wraps a PNG in an ICO container, which every browser accepts.
func encodeICO(rng *rand.Rand) []byte {
	img := encodePNG(rng, 16, 16)
	b := make([]byte, 6+16, 6+16+len(img))
	binary.LittleEndian.PutUint16(b[2:], 1) // type: icon
	binary.LittleEndian.PutUint16(b[4:], 1) // one image
	e := b[6:]
	e[0], e[1] = 16, 16
	binary.LittleEndian.PutUint16(e[4:], 1)  // colour planes
	binary.LittleEndian.PutUint16(e[6:], 32) // bits per pixel
	binary.LittleEndian.PutUint32(e[8:], uint32(len(img)))
	binary.LittleEndian.PutUint32(e[12:], 6+16)
	return append(b, img...)
}

// encodeFont returns bytes with a WOFF2 signature and header; the tables are
// noise. Crawlers only store fonts, they do not parse them.
func encodeFont(rng *rand.Rand) []byte {
	b := make([]byte, 2048)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	copy(b, "wOF2")
	binary.BigEndian.PutUint32(b[4:], 0x00010000) // TrueType flavour
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)))
	return b
}

// encodePDF writes a small well-formed PDF with a line of text and a binary
// stream, with a correct cross-reference table.
func encodePDF(rng *rand.Rand, title string) []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	var offsets []int
	obj := func(body string) {
		offsets = append(offsets, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", len(offsets), body)
	}
	text := fmt.Sprintf("BT /F1 18 Tf 72 720 Td (%s) Tj ET", title)
	noise := make([]byte, 512+rng.IntN(2048))
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	obj("<< /Type /Catalog /Pages 2 0 R >>")
	obj("<< /Type /Pages /Kids [3 0 R] /Count 1 >>")
	obj("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>")
	obj(fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(text), text))
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
	obj(fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(noise), noise))
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, xref)
	return b.Bytes()
}

// encodeJSON lists some of h's pages, with absolute URLs a crawler may
// choose to follow.
func encodeJSON(h *host, rng *rand.Rand) []byte {
	type item struct {
		ID    int    `json:"id"`
		Title string `json:"title"`
		URL   string `json:"url"`
	}
	v := struct {
		Site  string `json:"site"`
		Items []item `json:"items"`
	}{Site: h.dom.title}
	for i := range min(10, len(h.pages)) {
		p := h.pages[rng.IntN(len(h.pages))]
		v.Items = append(v.Items, item{ID: i + 1, Title: p.title, URL: p.url()})
	}
	b, _ := json.MarshalIndent(v, "", "  ") // plain structs always marshal
	return append(b, '\n')
}

func encodeCSV(rng *rand.Rand) []byte {
	var b strings.Builder
	b.WriteString("id,name,region,visits,rating\n")
	for i := range 20 + rng.IntN(80) {
		fmt.Fprintf(&b, "%d,%s %s,%s,%d,%.1f\n", i+1, adjectives[rng.IntN(len(adjectives))], nouns[rng.IntN(len(nouns))],
			[...]string{"north", "south", "east", "west"}[rng.IntN(4)], rng.IntN(100000), 1+4*rng.Float64())
	}
	return []byte(b.String())
}

func encodeText(rng *rand.Rand) []byte {
	b := make([]byte, 0, 2048)
	for range 5 + rng.IntN(10) {
		b = sentences(b, rng, 1+rng.IntN(3))
		b = append(b, "\n\n"...)
	}
	return b
}
