//! The HTTP chat API and web page (being built).
