BoutputJiQ
?