package analysis

// stopWords is a general English stop-word list (the common function words of the NLTK and Lucene lists). It is a
// read-only table: words that carry no meaning about what a tool does, whatever the catalogue.
var stopWords = func() map[string]struct{} {
	m := make(map[string]struct{})
	for _, w := range []string{
		"a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at",
		"be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did",
		"do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have",
		"having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into",
		"is", "it", "its", "itself", "just", "me", "might", "more", "most", "must", "my", "myself", "no", "nor",
		"not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over",
		"own", "same", "shall", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs",
		"them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
		"until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
		"will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "s", "t", "d", "ll", "m", "re",
		"ve", "e", "g", "eg", "ie", "etc", "also", "may", "us",
	} {
		m[w] = struct{}{}
	}
	return m
}()

// IsStopWord reports whether w (lower case) is an English function word that search ignores.
func IsStopWord(w string) bool {
	_, ok := stopWords[w]
	return ok
}

// requestWords are the words of general English with which a person asks for something ("please, I need to ...",
// "could you help me ..."), beyond the function words: in a request they say that something is asked, not what. A
// tool's description uses them otherwise ("Please provide the id", "returns items like these"), so matching them
// ranks tools by their phrasing. Only queries drop them (QueryTerms); tools are indexed with them.
var requestWords = func() map[string]struct{} {
	m := make(map[string]struct{})
	for _, w := range []string{
		"please", "kindly", "want", "wants", "wanted", "wanna", "need", "needs", "needed", "like", "help", "let",
		"lets", "thank", "thanks", "hi", "hello", "hey", "ok", "okay", "sure", "able", "possible",
	} {
		m[w] = struct{}{}
	}
	return m
}()

// IsRequestWord reports whether w (lower case) is a word of asking that a query's search ignores (requestWords).
func IsRequestWord(w string) bool {
	_, ok := requestWords[w]
	return ok
}
