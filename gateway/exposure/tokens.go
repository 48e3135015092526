package exposure

import (
	"unicode"
	"unicode/utf8"
)

// Tokens estimates how many tokens text costs a model: the count of o200k_base (the tokenizer of OpenAI's GPT-4o
// and later models; other vendors' tokenizers count within a similar range on tool definitions) without its 200,000
// entry vocabulary. It splits text the way that tokenizer's pre-tokenizer does (a word with the one symbol or
// space before it, digits in threes, symbol runs, spaces) and charges each piece by its kind and length: a common
// word is one token and longer or rarer ones a few, a symbol run one token per four
// characters, and text outside the Latin alphabet (CJK, Cyrillic ...) about one token per character or two.
// TestTokensAgainstTokenizer measures it against the real tokenizer on both catalogues of ../shared/fixtures.
func Tokens(text []byte) int {
	n := 0
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRune(text[i:])
		switch {
		case r == ' ' && i+size < len(text) && isLetter(text[i+size:]):
			// a space starts the word after it
			i += size
			n += word(text, &i)
		case isLetterRune(r):
			n += word(text, &i)
		case r >= '0' && r <= '9':
			j := i
			for j < len(text) && text[j] >= '0' && text[j] <= '9' {
				j++
			}
			n += (j - i + 2) / 3
			i = j
		case unicode.IsSpace(r):
			j := i + size
			for j < len(text) {
				r2, s2 := utf8.DecodeRune(text[j:])
				if !unicode.IsSpace(r2) {
					break
				}
				j += s2
			}
			n++
			i = j
		default:
			// a run of symbols
			j := i
			runes := 0
			for j < len(text) {
				r2, s2 := utf8.DecodeRune(text[j:])
				if isLetterRune(r2) || unicode.IsSpace(r2) || (r2 >= '0' && r2 <= '9') {
					break
				}
				j += s2
				runes++
			}
			n += 1 + (runes-1)/4 // JSON's common runs (":", ",", ":{") are one token each
			i = j
		}
	}
	return n
}

// word charges the letter run at text[*i:] and moves *i past it.
func word(text []byte, i *int) int {
	ascii, other := 0, 0
	j := *i
	for j < len(text) {
		r, s := utf8.DecodeRune(text[j:])
		if !isLetterRune(r) {
			break
		}
		if r < utf8.RuneSelf {
			ascii++
		} else if r < 0x0250 { // Latin with diacritics
			ascii += 2
		} else {
			other++
		}
		j += s
	}
	*i = j
	n := 0
	if ascii > 0 {
		n = 1 + (ascii-1)/8 // one token up to 8 letters, then one per 8 more
	}
	return n + (other*2+2)/3 // about 2 characters per 3 tokens outside the Latin alphabet
}

func isLetter(b []byte) bool {
	r, _ := utf8.DecodeRune(b)
	return isLetterRune(r)
}

func isLetterRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.Is(unicode.Mn, r) }
